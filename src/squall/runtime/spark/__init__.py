"""The Spark runner: one Structured Streaming query per topology (see docs/design/spark-runner.md).

Spouts live in the query's source reader, on the driver side; bolts run in `foreachBatch` as one
`mapInArrow` stage per component, each Spark partition hosting one task; the XOR ledger lives on
the driver, fed by per-task XOR aggregates collected with the batch's single action.
"""
