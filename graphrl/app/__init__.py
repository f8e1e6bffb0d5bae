"""Assembly: the library functions behind the commands (wire endpoints, tools and rewards to a plan,
run a dataset, the demo, diagnostics reports).

Input: plans, paths and options as plain values. Output: summaries, files, exit codes.
Sits above every other library layer and below `graphrl.cli` only; nothing here parses argv.
"""
