"""A harness that drives a destination the way Fivetran's destination tester does."""
