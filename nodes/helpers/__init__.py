"""Helper modules of the stage nodes: plain functions and values, no Hamilton nodes of their own."""
