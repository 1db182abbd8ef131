"""Python modules for our dialects' namespaces, found through MLIR's dialect search prefixes.

The bindings look up a Python op class for every op they hand out (each `block.operations`
iteration) by importing `<prefix>.<namespace>`, and cache only a successful import: without a
module for `tile`, every tile op handed out retried `import mlir.dialects.tile` and failed, a
fifth of a compile's Python time. See `tiledsl.ir.dialect.load_tile_dialect`.
"""
