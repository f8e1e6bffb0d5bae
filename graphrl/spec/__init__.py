"""The graph language: YAML loading with locations, the pydantic models, diagnostics, Jinja helpers.

Input: graph files. Output: `Graph` trees and `Diagnostic`s. The bottom of the package (above
`graphrl.errors`): nothing here imports another graphrl layer.
"""
