// PASS: lower-to-gpu gfx942
// A column-masked copy of a 32x64 f16 tile (row strides a multiple of 8 elements, C % 8 == 0):
// 256 lanes hold one 8-element row piece each, so the load is one 16-byte vector and the store
// one 16-byte vector, each through a buffer descriptor of its tensor (2 GiB reach, gfx9's word 3)
// whose byte offset is moved out of range by one select on the test of its first column (the
// mask is uniform over the vector): no branch, masked-off lanes read 0 and write nothing.
// CHECK: gpu.func @masked_copy({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK-NOT: scf.if
// CHECK: %[[FIRST:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : i32
// CHECK: %[[MASK:.*]] = vector.from_elements %[[FIRST]], {{.*}} : vector<8xi1>
// CHECK: %[[TEST:.*]] = vector.extract %[[MASK]][0] : i1 from vector<8xi1>
// CHECK: %[[X:.*]] = rocdl.make.buffer.rsrc %arg0, %c0_i16{{[_0-9]*}}, %c2147483648_i64{{[_0-9]*}}, %c131072_i32{{[_0-9]*}}
// CHECK: %[[BYTES:.*]] = arith.muli %{{.*}}, %c2_i32{{[_0-9]*}} : i32
// CHECK: %[[OFF:.*]] = arith.select %[[TEST]], %[[BYTES]], %c-2147483648_i32{{[_0-9]*}} : i32
// CHECK: rocdl.raw.ptr.buffer.load %[[X]], %[[OFF]], %{{.*}}, %{{.*}} : vector<4xi32>
// CHECK-NOT: rocdl.raw.ptr.buffer.load
// CHECK: %[[SFIRST:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : i32
// CHECK: %[[SMASK:.*]] = vector.from_elements %[[SFIRST]], {{.*}} : vector<8xi1>
// CHECK: %[[STEST:.*]] = vector.extract %[[SMASK]][0] : i1 from vector<8xi1>
// CHECK: %[[Y:.*]] = rocdl.make.buffer.rsrc %arg2, %c0_i16{{[_0-9]*}}, %c2147483648_i64{{[_0-9]*}}, %c131072_i32{{[_0-9]*}}
// CHECK: %[[SOFF:.*]] = arith.select %[[STEST]], %{{.*}}, %c-2147483648_i32{{[_0-9]*}} : i32
// CHECK: rocdl.raw.ptr.buffer.store %{{.*}}, %[[Y]], %[[SOFF]], %{{.*}}, %{{.*}} : vector<4xi32>
// CHECK-NOT: rocdl.raw.ptr.buffer.store
// CHECK-NOT: scf.if
// CHECK: gpu.return
module attributes {tile.arch = "gfx942", tile.lds_arena = 0 : i32, tile.lds_bytes = 0 : i32} {
  func.func @masked_copy(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: i32, %arg5: i32) attributes {tile.kernel, tile.waves = 4 : i32} {
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
