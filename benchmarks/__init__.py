"""graphrl benchmarks: compiled graphs vs hand-written slime generate functions on a simulated server.

Run `python -m benchmarks.run` (full) or `python -m benchmarks.run --quick` (under a minute);
docs/performance.md has the results and what each column means.

  sim/        the latency-simulating SGLang-protocol server (separate process) and its outputs
  baselines/  hand-written generate functions: token-exact ("careful") and text-based
  data.py     seeded datasets (MemAgent documents, ToolOrchestra problems)
  graphs.py   the benchmark variants of the bundled graphs, compiled with `graphrl compile`
  client.py   one measured cell (workflow x system x concurrency), optionally in its own process
  audit.py    trained tokens vs the tokens the server sampled
  run.py      the harness: server, cells, tables
"""
