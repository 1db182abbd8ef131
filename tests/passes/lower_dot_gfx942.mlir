// PASS: lower-to-gpu gfx942
// One gpu.func per kernel in a gpu.module, the module naming its arch; LDS is a
// workgroup-address-space global; the wave id is made uniform with readfirstlane; a 64x64x32 dot
// over 2x2 waves is 4 MFMA 32x32x8 per wave.
// CHECK: module attributes {gpu.container_module, tile.arch = "gfx942"}
// CHECK: gpu.module @kernels
// CHECK: llvm.mlir.global internal @__tile_lds() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<4608 x i8>
// CHECK: gpu.func @dot({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK: rocdl.readfirstlane
// CHECK: rocdl.s.barrier
// CHECK-COUNT-4: amdgpu.mfma 32x32x8
// CHECK-NOT: amdgpu.mfma
// CHECK: gpu.return
module attributes {tile.lds_bytes = 4608 : i32} {
  func.func @dot(%arg0: !llvm.ptr<1>, %arg1: !llvm.ptr<1>, %arg2: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,acc(mfma,32,32,8,4,f16,2,2))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,acc(mfma,32,32,8,4,f16,2,2))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,blocked(8))">
    %4 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">
    %5 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,acc(mfma,32,32,8,4,f16,2,2))">) -> tensor<64x1xi32, "expand(1,slice(1,64,acc(mfma,32,32,8,4,f16,2,2)))">
    %6 = "tile.expand_dims"(%3) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">
    %7 = "tile.broadcast"(%4) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %8 = "tile.broadcast"(%6) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %c32_i32 = arith.constant 32 : i32
    %9 = "tile.splat"(%c32_i32) : (i32) -> tensor<64x32xi32, "blocked(8)">
    %10 = arith.muli %7, %9 : tensor<64x32xi32, "blocked(8)">
    %11 = arith.addi %10, %8 : tensor<64x32xi32, "blocked(8)">
    %true = arith.constant true
    %12 = "tile.splat"(%true) : (i1) -> tensor<64x32xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %13 = "tile.load"(%arg0, %11, %12, %cst) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
    %14 = "tile.load"(%arg1, %11, %12, %cst) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
    %cst_0 = arith.constant 0.000000e+00 : f32
    %15 = "tile.splat"(%cst_0) : (f32) -> tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">
    "tile.barrier"() : () -> ()
    "tile.local_store"(%13) {offset = 0 : i32, row_stride = 36 : i32} : (tensor<64x32xf16, "blocked(8)">) -> ()
    "tile.barrier"() : () -> ()
    %16 = "tile.local_load"() {offset = 0 : i32, row_stride = 36 : i32} : () -> tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">
    "tile.barrier"() : () -> ()
    "tile.local_store"(%14) {offset = 0 : i32, row_stride = 36 : i32} : (tensor<64x32xf16, "blocked(8)">) -> ()
    "tile.barrier"() : () -> ()
    %17 = "tile.local_load"() {offset = 0 : i32, row_stride = 36 : i32} : () -> tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">
    %18 = "tile.dot"(%16, %17, %15) {trans_b = true} : (tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">, tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">) -> tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">
    %19 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,acc(mfma,32,32,8,4,f16,2,2))">) -> tensor<1x64xi32, "expand(0,slice(0,64,acc(mfma,32,32,8,4,f16,2,2)))">
    %20 = "tile.broadcast"(%5) : (tensor<64x1xi32, "expand(1,slice(1,64,acc(mfma,32,32,8,4,f16,2,2)))">) -> tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %21 = "tile.broadcast"(%19) : (tensor<1x64xi32, "expand(0,slice(0,64,acc(mfma,32,32,8,4,f16,2,2)))">) -> tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %c64_i32 = arith.constant 64 : i32
    %22 = "tile.splat"(%c64_i32) : (i32) -> tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %23 = arith.muli %20, %22 : tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %24 = arith.addi %23, %21 : tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %25 = "tile.splat"(%true) : (i1) -> tensor<64x64xi1, "acc(mfma,32,32,8,4,f16,2,2)">
    "tile.store"(%arg2, %24, %18, %25) : (!llvm.ptr<1>, tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xi1, "acc(mfma,32,32,8,4,f16,2,2)">) -> ()
    return
  }
}
