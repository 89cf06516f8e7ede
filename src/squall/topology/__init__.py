"""The topology description: fields, tuples, groupings, config, builder and validation."""
