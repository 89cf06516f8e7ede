"""The transaction kernel: what transactional topologies (`squall.transactional`), Trident
(`squall.trident`), the runners and the connectors share about transactions.

- `attempt`: `TransactionAttempt`, which transaction a batch belongs to and which try of it;
- `values`: `TransactionalValue` and `OpaqueValue`, Storm's idempotent per-key update rules;
- `map_state`: Storm's map states (`TransactionalMap`, `OpaqueMap`, `NonTransactionalMap`) over a
  backing map: Trident's states (`squall.trident.state`) and a transactional topology's committer
  maps (`squall.transactional.open_map`);
- `progress_store`: where coordinator progress and per-partition batch metadata live (a
  directory, Redis, or memory), named by `squall.transactional.progress_store`;
- `spouts`: the partitioned transactional and opaque spout interfaces, and the questions a
  coordinator asks of them and the store (exhausted? idle?);
- `reports`: `BatchReport`, what a task tells the Spark driver about its part of a batch.

Pure: no Spark, no runner, no clock.
"""
