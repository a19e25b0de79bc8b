"""A GPU-less model server that behaves like vLLM on the wire: the member to try routing with.

`simulator.vllm` is the server (continuous batching, a prefix cache, vLLM's metrics; docs/simulator.md);
`jetway sim` runs it as an InferencePoolMember of a running Jetway. The tests and the benchmarks use it
as the other side of the wire; only `jetway sim` imports it.
"""
