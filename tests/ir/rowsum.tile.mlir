// A [8, 64] f16 tile: row sums stored as f32. Exercises arange/expand/broadcast/load/reduce/store.
module {
  func.func @rowsum(%x: !llvm.ptr<1>, %y: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %r = "tile.arange"() {start = 0 : i32} : () -> tensor<8xi32>
    %c = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %r2 = "tile.expand_dims"(%r) {axis = 1 : i32} : (tensor<8xi32>) -> tensor<8x1xi32>
    %c2 = "tile.expand_dims"(%c) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
    %rb = "tile.broadcast"(%r2) : (tensor<8x1xi32>) -> tensor<8x64xi32>
    %cb = "tile.broadcast"(%c2) : (tensor<1x64xi32>) -> tensor<8x64xi32>
    %c64 = arith.constant 64 : i32
    %s = "tile.splat"(%c64) : (i32) -> tensor<8x64xi32>
    %rs = arith.muli %rb, %s : tensor<8x64xi32>
    %off = arith.addi %rs, %cb : tensor<8x64xi32>
    %true = arith.constant true
    %m = "tile.splat"(%true) : (i1) -> tensor<8x64xi1>
    %z = arith.constant 0.0 : f16
    %v = "tile.load"(%x, %off, %m, %z) : (!llvm.ptr<1>, tensor<8x64xi32>, tensor<8x64xi1>, f16) -> tensor<8x64xf16>
    %vf = arith.extf %v : tensor<8x64xf16> to tensor<8x64xf32>
    %sum = "tile.reduce"(%vf) {kind = "sum", axis = 1 : i32} : (tensor<8x64xf32>) -> tensor<8xf32>
    %mr = "tile.splat"(%true) : (i1) -> tensor<8xi1>
    "tile.store"(%y, %r, %sum, %mr) : (!llvm.ptr<1>, tensor<8xi32>, tensor<8xf32>, tensor<8xi1>) -> ()
    return
  }
}
