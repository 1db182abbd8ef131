"""The `tile` namespace's Python module: empty, since tile ops are built generically
(`tiledsl.ir.dialect.tile_op`) and read as `ir.Operation`. Its existence is what counts (see the
package's docstring)."""
