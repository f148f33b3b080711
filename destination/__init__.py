"""records-destination: a Fivetran Partner SDK v2 destination writing records directories."""
