"""Reading Fivetran batch files: decrypt → decompress → parse → typed Arrow."""
