// PASS: stage-lds gfx950
// gfx950 transposes in the LDS read: the B operand [K, N] of an NN product, loaded row-major (N
// contiguous), is stored row-major like the A operand (no `transposed` store, element by element)
// and its load is marked `transpose_read` (lower-to-gpu reads it with ds_read_b64_tr_b16). Its
// rows take the padding whose stores and reads meet the fewest bank conflicts: none here (the
// 16-byte stores of two 128-byte rows fill the 64 banks; padded to 68 they would conflict 2 ways,
// and the reads cost the same). gfx942 stores it transposed (stage_lds_convert.mlir). The A
// operand's rows take 40 elements, not the usual 36: its lanes read 16 bytes each, which 72-byte
// rows would leave 8-byte aligned (two reads each), and 80-byte rows meet no more bank conflicts.
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 40 : i32}
// CHECK: "tile.local_load"(){{.*}} -> tensor<64x32xf16, "opa(mfma,32,32,16,8,f16,2,2)">
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 64 : i32, transpose_read} : (tensor<32x64xf16, "blocked(8)">)
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"() {offset = 0 : i32, row_stride = 64 : i32, transpose_read} : () -> tensor<32x64xf16, "opb(mfma,32,32,16,8,f16,2,2)">
// CHECK-NOT: transposed
module attributes {tile.arch = "gfx950"} {
  func.func @nn(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: i32, %arg6: i32, %arg7: i32, %arg8: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,acct(mfma,32,32,16,8,f16,2,2))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,blocked(8))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,64,blocked(8))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,32,blocked(8))">
    %5 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,acct(mfma,32,32,16,8,f16,2,2))">
    %6 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">
    %7 = "tile.broadcast"(%6) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %8 = "tile.splat"(%arg1) : (i32) -> tensor<64x32xi32, "blocked(8)">
    %9 = arith.muli %7, %8 : tensor<64x32xi32, "blocked(8)">
    %10 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">
    %11 = "tile.broadcast"(%10) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %12 = arith.addi %9, %11 : tensor<64x32xi32, "blocked(8)">
    %true = arith.constant true
    %13 = "tile.splat"(%true) : (i1) -> tensor<64x32xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %14 = "tile.load"(%arg0, %12, %13, %cst) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
    %15 = "tile.expand_dims"(%3) {axis = 1 : i32} : (tensor<32xi32, "slice(1,64,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %16 = "tile.broadcast"(%15) : (tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %17 = "tile.splat"(%arg3) : (i32) -> tensor<32x64xi32, "blocked(8)">
    %18 = arith.muli %16, %17 : tensor<32x64xi32, "blocked(8)">
    %19 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<64xi32, "slice(0,32,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %20 = "tile.broadcast"(%19) : (tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %21 = arith.addi %18, %20 : tensor<32x64xi32, "blocked(8)">
    %true_0 = arith.constant true
    %22 = "tile.splat"(%true_0) : (i1) -> tensor<32x64xi1, "blocked(8)">
    %cst_1 = arith.constant 0.000000e+00 : f16
    %23 = "tile.load"(%arg2, %21, %22, %cst_1) : (!llvm.ptr<1>, tensor<32x64xi32, "blocked(8)">, tensor<32x64xi1, "blocked(8)">, f16) -> tensor<32x64xf16, "blocked(8)">
    %24 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,acct(mfma,32,32,16,8,f16,2,2))">) -> tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,16,8,f16,2,2)))">
    %25 = "tile.broadcast"(%24) : (tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,16,8,f16,2,2)))">) -> tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %26 = "tile.splat"(%arg5) : (i32) -> tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %27 = arith.muli %25, %26 : tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %28 = "tile.expand_dims"(%5) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,acct(mfma,32,32,16,8,f16,2,2))">) -> tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,32,32,16,8,f16,2,2)))">
    %29 = "tile.broadcast"(%28) : (tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,32,32,16,8,f16,2,2)))">) -> tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %30 = arith.addi %27, %29 : tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %cst_2 = arith.constant 0.000000e+00 : f32
    %31 = "tile.splat"(%cst_2) : (f32) -> tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">
    %32 = "tile.convert_layout"(%14) : (tensor<64x32xf16, "blocked(8)">) -> tensor<64x32xf16, "opa(mfma,32,32,16,8,f16,2,2)">
    %33 = "tile.convert_layout"(%23) : (tensor<32x64xf16, "blocked(8)">) -> tensor<32x64xf16, "opb(mfma,32,32,16,8,f16,2,2)">
    %34 = "tile.dot"(%32, %33, %31) {trans_b = false} : (tensor<64x32xf16, "opa(mfma,32,32,16,8,f16,2,2)">, tensor<32x64xf16, "opb(mfma,32,32,16,8,f16,2,2)">, tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">) -> tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">
    %true_3 = arith.constant true
    %35 = "tile.splat"(%true_3) : (i1) -> tensor<64x64xi1, "acct(mfma,32,32,16,8,f16,2,2)">
    "tile.store"(%arg4, %30, %34, %35) : (!llvm.ptr<1>, tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">, tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">, tensor<64x64xi1, "acct(mfma,32,32,16,8,f16,2,2)">) -> ()
    return
  }
}
