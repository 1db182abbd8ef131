// PASS: lower-to-gpu gfx942
// A column-masked copy of a 32x64 f16 tile (row strides a multiple of 8 elements, C % 8 == 0):
// both tensors declared large (options.large_tensors: no buffer instructions, 64-bit addresses):
// 256 lanes hold one 8-element row piece each, so the load is one 16-byte vector under one test
// of its first column (the mask is uniform over the vector), `other` broadcast on the else side,
// and the store is one 16-byte vector under one test.
// CHECK: gpu.func @masked_copy({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK-NOT: rocdl.make.buffer.rsrc
// CHECK: %[[FIRST:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : i32
// CHECK: %[[MASK:.*]] = vector.from_elements %[[FIRST]], {{.*}} : vector<8xi1>
// CHECK: %[[TEST:.*]] = vector.extract %[[MASK]][0] : i1 from vector<8xi1>
// CHECK: scf.if %[[TEST]] -> (vector<8xf16>) {
// CHECK-NEXT: llvm.getelementptr %arg0[%{{.*}}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f16
// CHECK-NEXT: llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr<1> -> vector<8xf16>
// CHECK: } else {
// CHECK-NEXT: vector.broadcast %{{.*}} : f16 to vector<8xf16>
// CHECK-NOT: llvm.load
// CHECK: scf.if %{{.*}} {
// CHECK-NEXT: llvm.getelementptr %arg2[%{{.*}}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f16
// CHECK: llvm.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : vector<8xf16>, !llvm.ptr<1>
// CHECK-NOT: llvm.store
// CHECK: gpu.return
module attributes {tile.arch = "gfx942", tile.lds_arena = 0 : i32, tile.lds_bytes = 0 : i32} {
  func.func @masked_copy(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: i32, %arg5: i32) attributes {tile.kernel, tile.large_args = array<i32: 0, 2>, tile.waves = 4 : i32} {
    %c8_i32 = arith.constant 8 : i32
    %0 = arith.muli %arg5, %c8_i32 : i32
    %c8_i32_0 = arith.constant 8 : i32
    %1 = arith.muli %arg3, %c8_i32_0 : i32
    %c8_i32_1 = arith.constant 8 : i32
    %2 = arith.muli %arg1, %c8_i32_1 : i32
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,64,blocked(8))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,32,blocked(8))">
    %5 = "tile.expand_dims"(%3) {axis = 1 : i32} : (tensor<32xi32, "slice(1,64,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %6 = "tile.broadcast"(%5) : (tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %7 = "tile.splat"(%2) : (i32) -> tensor<32x64xi32, "blocked(8)">
    %8 = arith.muli %6, %7 : tensor<32x64xi32, "blocked(8)">
    %9 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<64xi32, "slice(0,32,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %10 = "tile.broadcast"(%9) : (tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %11 = arith.addi %8, %10 : tensor<32x64xi32, "blocked(8)">
    %12 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<64xi32, "slice(0,32,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %13 = "tile.splat"(%0) : (i32) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %14 = arith.cmpi slt, %12, %13 : tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %15 = "tile.broadcast"(%14) : (tensor<1x64xi1, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x64xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %16 = "tile.load"(%arg0, %11, %15, %cst) : (!llvm.ptr<1>, tensor<32x64xi32, "blocked(8)">, tensor<32x64xi1, "blocked(8)">, f16) -> tensor<32x64xf16, "blocked(8)">
    %17 = "tile.expand_dims"(%3) {axis = 1 : i32} : (tensor<32xi32, "slice(1,64,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %18 = "tile.broadcast"(%17) : (tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %19 = "tile.splat"(%1) : (i32) -> tensor<32x64xi32, "blocked(8)">
    %20 = arith.muli %18, %19 : tensor<32x64xi32, "blocked(8)">
    %21 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<64xi32, "slice(0,32,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %22 = "tile.broadcast"(%21) : (tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %23 = arith.addi %20, %22 : tensor<32x64xi32, "blocked(8)">
    %24 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<64xi32, "slice(0,32,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %25 = "tile.splat"(%0) : (i32) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %26 = arith.cmpi slt, %24, %25 : tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %27 = "tile.broadcast"(%26) : (tensor<1x64xi1, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x64xi1, "blocked(8)">
    "tile.store"(%arg2, %23, %16, %27) : (!llvm.ptr<1>, tensor<32x64xi32, "blocked(8)">, tensor<32x64xf16, "blocked(8)">, tensor<32x64xi1, "blocked(8)">) -> ()
    return
  }
}
