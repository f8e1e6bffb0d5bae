"""Diagrams of graphs and trajectories (`graphrl visualize`).

Stages, each a small module, pure except where noted:

    diagram.py     Plan -> Diagram (nodes by kind and training role, labelled edges)
    layout.py      nodes + sizes + edges -> layered (Sugiyama-style) positions and edge routes
    svg.py         Diagram -> deterministic SVG (via layout.py); also embedded by the trajectory viewer
    textgraph.py   Diagram -> Graphviz DOT, Mermaid, plain text; `dot -Tsvg` when asked (runs Graphviz)
    trajectory.py  trajectory JSONL / slime debug dumps (.pt) -> Trajectory (reads files)
    tokens.py      token ids -> display texts (lazy tokenizer import)
    payload.py     Trajectory -> the compact, size-capped JSON the HTML viewer embeds
    html.py        payload + SVG + assets/viewer.{css,js} -> one self-contained HTML file
    trace.py       Trajectory -> Chrome trace JSON (Perfetto)
    textview.py    Trajectory -> terminal preview with ANSI-coloured tokens
    build.py       input file + options -> output text; finds a trajectory's graph; VizError exit codes
    cli.py         the `graphrl visualize` click command (I/O, exit codes)
"""
