"""Hamilton function modules, one per RFC-0005 stage. Pure, except the candidate nodes that read stores."""
