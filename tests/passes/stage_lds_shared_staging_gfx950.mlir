// PASS: stage-lds gfx950
// One tile, two dot operands that read the same stored bytes: Q (32x64) is the B operand of
// S^T = K Q^T (given as [N, K]) and of S^T Q (as [K, N]: a transpose read on gfx950). Both
// stagings store Q row-major, so the second one reads what the first stored: no store and no
// barrier of its own. Both take one row length, the padding cheapest for their reads and the
// store together (72). K, read only along rows, takes 72 too: its lanes read 16 bytes each, which
// the usual 68 (136-byte rows) would leave 8-byte aligned.
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 72 : i32} : (tensor<64x64xf16
// CHECK: "tile.local_store"([[Q:%[0-9]+]]) {offset = 0 : i32, row_stride = 72 : i32} : (tensor<32x64xf16, "blocked(8)">)
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"() {offset = 0 : i32, row_stride = 72 : i32} : () -> tensor<32x64xf16, "opbt(
// CHECK-NOT: "tile.local_store"
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_load"() {offset = 0 : i32, row_stride = 72 : i32, transpose_read} : () -> tensor<32x64xf16, "permk(0,{{.*}}opb(
// CHECK-NOT: "tile.local_store"
module attributes {tile.arch = "gfx950"} {
  func.func @share(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,blocked(8))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,32,blocked(8))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,acct(mfma,16,16,32,8,f16,4,1))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,acct(mfma,16,16,32,8,f16,4,1))">
    %5 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,64,blocked(8))">
    %6 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %7 = "tile.broadcast"(%6) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %8 = "tile.splat"(%arg1) : (i32) -> tensor<64x64xi32, "blocked(8)">
    %9 = arith.muli %7, %8 : tensor<64x64xi32, "blocked(8)">
    %10 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">
    %11 = "tile.broadcast"(%10) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %12 = arith.addi %9, %11 : tensor<64x64xi32, "blocked(8)">
    %true = arith.constant true
    %13 = "tile.splat"(%true) : (i1) -> tensor<64x64xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %14 = "tile.load"(%arg0, %12, %13, %cst) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(8)">, tensor<64x64xi1, "blocked(8)">, f16) -> tensor<64x64xf16, "blocked(8)">
    %15 = "tile.expand_dims"(%5) {axis = 1 : i32} : (tensor<32xi32, "slice(1,64,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %16 = "tile.broadcast"(%15) : (tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %17 = "tile.splat"(%arg3) : (i32) -> tensor<32x64xi32, "blocked(8)">
    %18 = arith.muli %16, %17 : tensor<32x64xi32, "blocked(8)">
    %19 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<64xi32, "slice(0,32,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %20 = "tile.broadcast"(%19) : (tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %21 = arith.addi %18, %20 : tensor<32x64xi32, "blocked(8)">
    %true_0 = arith.constant true
    %22 = "tile.splat"(%true_0) : (i1) -> tensor<32x64xi1, "blocked(8)">
    %cst_1 = arith.constant 0.000000e+00 : f16
    %23 = "tile.load"(%arg2, %21, %22, %cst_1) : (!llvm.ptr<1>, tensor<32x64xi32, "blocked(8)">, tensor<32x64xi1, "blocked(8)">, f16) -> tensor<32x64xf16, "blocked(8)">
    %cst_2 = arith.constant 0.000000e+00 : f32
    %24 = "tile.splat"(%cst_2) : (f32) -> tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %25 = "tile.convert_layout"(%14) : (tensor<64x64xf16, "blocked(8)">) -> tensor<64x64xf16, "opa(mfma,16,16,32,8,f16,4,1)">
    %26 = "tile.convert_layout"(%23) : (tensor<32x64xf16, "blocked(8)">) -> tensor<32x64xf16, "opbt(mfma,16,16,32,8,f16,4,1)">
    %27 = "tile.dot"(%25, %26, %24) {trans_b = true} : (tensor<64x64xf16, "opa(mfma,16,16,32,8,f16,4,1)">, tensor<32x64xf16, "opbt(mfma,16,16,32,8,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)">) -> tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %28 = "tile.expand_dims"(%3) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,acct(mfma,16,16,32,8,f16,4,1))">) -> tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,16,16,32,8,f16,4,1)))">
    %29 = "tile.broadcast"(%28) : (tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,16,16,32,8,f16,4,1)))">) -> tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %30 = "tile.splat"(%arg5) : (i32) -> tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %31 = arith.muli %29, %30 : tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %32 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,acct(mfma,16,16,32,8,f16,4,1))">) -> tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,16,16,32,8,f16,4,1)))">
    %33 = "tile.broadcast"(%32) : (tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,16,16,32,8,f16,4,1)))">) -> tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %34 = arith.addi %31, %33 : tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %cst_3 = arith.constant 0.000000e+00 : f32
    %35 = "tile.splat"(%cst_3) : (f32) -> tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %36 = arith.truncf %27 : tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)"> to tensor<64x32xf16, "acct(mfma,16,16,32,8,f16,4,1)">
    %37 = "tile.convert_layout"(%36) : (tensor<64x32xf16, "acct(mfma,16,16,32,8,f16,4,1)">) -> tensor<64x32xf16, "permk(1,1:2:16:4:8,opa(mfma,16,16,32,8,f16,4,1))">
    %38 = "tile.convert_layout"(%23) : (tensor<32x64xf16, "blocked(8)">) -> tensor<32x64xf16, "permk(0,1:2:16:4:8,opb(mfma,16,16,32,8,f16,4,1))">
    %39 = "tile.dot"(%37, %38, %35) {trans_b = false} : (tensor<64x32xf16, "permk(1,1:2:16:4:8,opa(mfma,16,16,32,8,f16,4,1))">, tensor<32x64xf16, "permk(0,1:2:16:4:8,opb(mfma,16,16,32,8,f16,4,1))">, tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">) -> tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %true_4 = arith.constant true
    %40 = "tile.splat"(%true_4) : (i1) -> tensor<64x64xi1, "acct(mfma,16,16,32,8,f16,4,1)">
    "tile.store"(%arg4, %34, %39, %40) : (!llvm.ptr<1>, tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">, tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">, tensor<64x64xi1, "acct(mfma,16,16,32,8,f16,4,1)">) -> ()
    return
  }
}
