"""The `jetway` command: offline tools (validate, render, generate), the embedded stack
(`up`), and clients of its apply API and event stream."""
