"""The retrieval dataflow's Hamilton function modules: one per RFC-0005 stage; the values that flow
between them (`models`: request and analysis, `pools`: the candidate pool, `bundle`: the Memory
Bundle) and their settings (`settings`); `helpers/` holds the plain functions the stages share. Pure,
except the candidate nodes that read stores."""
