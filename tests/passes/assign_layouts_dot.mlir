// PASS: assign-layouts gfx942
// Loads are coalesced (blocked), dot operands are converted to the MFMA operand layouts, the
// result is in the transposed accumulator layout (rows in lanes) and the store address
// computation is rematerialised in it.
// CHECK-LABEL: func.func @dot
// CHECK: "tile.load"{{.*}} -> tensor<64x32xf16, "blocked(8)">
// CHECK: "tile.convert_layout"{{.*}} -> tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">
// CHECK: "tile.convert_layout"{{.*}} -> tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">
// CHECK: "tile.dot"{{.*}} -> tensor<64x64xf32, "acct(mfma,32,32,8,4,f16,2,2)">
// CHECK: "tile.store"{{.*}}tensor<64x64xi32, "acct(mfma,32,32,8,4,f16,2,2)">
module {
  func.func @dot(%a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %c: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %r = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %k = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32>
    %r2 = "tile.expand_dims"(%r) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32>
    %k2 = "tile.expand_dims"(%k) {axis = 0 : i32} : (tensor<32xi32>) -> tensor<1x32xi32>
    %rb = "tile.broadcast"(%r2) : (tensor<64x1xi32>) -> tensor<64x32xi32>
    %kb = "tile.broadcast"(%k2) : (tensor<1x32xi32>) -> tensor<64x32xi32>
    %c32 = arith.constant 32 : i32
    %s = "tile.splat"(%c32) : (i32) -> tensor<64x32xi32>
    %rs = arith.muli %rb, %s : tensor<64x32xi32>
    %off = arith.addi %rs, %kb : tensor<64x32xi32>
    %true = arith.constant true
    %m = "tile.splat"(%true) : (i1) -> tensor<64x32xi1>
    %z = arith.constant 0.0 : f16
    %ta = "tile.load"(%a, %off, %m, %z) : (!llvm.ptr<1>, tensor<64x32xi32>, tensor<64x32xi1>, f16) -> tensor<64x32xf16>
    %tb = "tile.load"(%b, %off, %m, %z) : (!llvm.ptr<1>, tensor<64x32xi32>, tensor<64x32xi1>, f16) -> tensor<64x32xf16>
    %zf = arith.constant 0.0 : f32
    %acc = "tile.splat"(%zf) : (f32) -> tensor<64x64xf32>
    %d = "tile.dot"(%ta, %tb, %acc) {trans_b = true} : (tensor<64x32xf16>, tensor<64x32xf16>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %n2 = "tile.expand_dims"(%r) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
    %rb2 = "tile.broadcast"(%r2) : (tensor<64x1xi32>) -> tensor<64x64xi32>
    %nb2 = "tile.broadcast"(%n2) : (tensor<1x64xi32>) -> tensor<64x64xi32>
    %c64 = arith.constant 64 : i32
    %s64 = "tile.splat"(%c64) : (i32) -> tensor<64x64xi32>
    %ro = arith.muli %rb2, %s64 : tensor<64x64xi32>
    %offc = arith.addi %ro, %nb2 : tensor<64x64xi32>
    %mc = "tile.splat"(%true) : (i1) -> tensor<64x64xi1>
    "tile.store"(%c, %offc, %d, %mc) : (!llvm.ptr<1>, tensor<64x64xi32>, tensor<64x64xf32>, tensor<64x64xi1>) -> ()
    return
  }
}
