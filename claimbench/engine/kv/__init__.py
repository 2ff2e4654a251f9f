"""KV memory: the paged pool and its sizing, the block manager (pages, block tables, per-tenant
accounting) and the prefix cache."""
