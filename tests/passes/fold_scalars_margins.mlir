// PASS: fold-scalars gfx942
// The scalars of each margin join the [32] key vector (n0 + ns) before its broadcast: one splat of
// one scalar sum per margin, no splat at [64, 32]; the store address (muli, addi) is left alone.
// CHECK: scf.for %[[N0:[a-z0-9_]+]] = 
// CHECK: %[[S1:.*]] = arith.addi %{{.*}}, %[[N0]] : i32
// CHECK-NEXT: %[[S2:.*]] = arith.subi %[[S1]], %{{.*}} : i32
// CHECK-NEXT: %[[V1:.*]] = "tile.splat"(%[[S2]]) : (i32) -> tensor<32xi32>
// CHECK-NEXT: arith.addi %{{.*}}, %[[V1]] : tensor<32xi32>
// CHECK: %[[S3:.*]] = arith.subi %{{.*}}, %[[N0]] : i32
// CHECK-NEXT: %[[V2:.*]] = "tile.splat"(%[[S3]]) : (i32) -> tensor<32xi32>
// CHECK-NEXT: arith.subi %[[V2]], %{{.*}} : tensor<32xi32>
// CHECK-NOT: "tile.splat"({{.*}}) : (i32) -> tensor<64x32xi32>
// CHECK: scf.yield
// CHECK: arith.muli
#loc1 = loc("tests/kernels/margins.tile":1:1)
module attributes {tile.arch = "gfx942"} {
  func.func @margins(%arg0: !llvm.ptr<1> loc("tests/kernels/margins.tile":1:1), %arg1: i32 loc("tests/kernels/margins.tile":1:1), %arg2: i32 loc("tests/kernels/margins.tile":1:1), %arg3: i32 loc("tests/kernels/margins.tile":1:1), %arg4: i32 loc("tests/kernels/margins.tile":1:1), %arg5: i32 loc("tests/kernels/margins.tile":1:1), %arg6: i32 loc("tests/kernels/margins.tile":1:1)) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32> loc(#loc2)
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32> loc(#loc3)
    %c0_i32 = arith.constant 0 : i32 loc(#loc4)
    %2 = "tile.splat"(%c0_i32) : (i32) -> tensor<64x32xi32> loc(#loc4)
    %c0_i32_0 = arith.constant 0 : i32 loc(#loc5)
    %c32_i32 = arith.constant 32 : i32 loc(#loc6)
    %3 = scf.for %arg7 = %c0_i32_0 to %arg6 step %c32_i32 iter_args(%arg8 = %2) -> (tensor<64x32xi32>)  : i32 {
      %12 = "tile.splat"(%arg7) : (i32) -> tensor<32xi32> loc(#loc8)
      %13 = arith.addi %12, %1 : tensor<32xi32> loc(#loc8)
      %14 = "tile.expand_dims"(%13) {axis = 0 : i32} : (tensor<32xi32>) -> tensor<1x32xi32> loc(#loc9)
      %15 = "tile.broadcast"(%14) : (tensor<1x32xi32>) -> tensor<64x32xi32> loc(#loc9)
      %16 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32> loc(#loc10)
      %17 = "tile.broadcast"(%16) : (tensor<64x1xi32>) -> tensor<64x32xi32> loc(#loc9)
      %18 = arith.subi %15, %17 : tensor<64x32xi32> loc(#loc9)
      %19 = "tile.splat"(%arg2) : (i32) -> tensor<64x32xi32> loc(#loc9)
      %20 = arith.subi %18, %19 : tensor<64x32xi32> loc(#loc9)
      %21 = "tile.splat"(%arg3) : (i32) -> tensor<64x32xi32> loc(#loc9)
      %22 = arith.addi %20, %21 : tensor<64x32xi32> loc(#loc9)
      %23 = "tile.splat"(%arg4) : (i32) -> tensor<1x32xi32> loc(#loc11)
      %24 = "tile.expand_dims"(%13) {axis = 0 : i32} : (tensor<32xi32>) -> tensor<1x32xi32> loc(#loc12)
      %25 = arith.subi %23, %24 : tensor<1x32xi32> loc(#loc11)
      %26 = "tile.broadcast"(%25) : (tensor<1x32xi32>) -> tensor<64x32xi32> loc(#loc13)
      %27 = arith.minsi %22, %26 : tensor<64x32xi32> loc(#loc13)
      %28 = arith.minsi %arg8, %27 : tensor<64x32xi32> loc(#loc14)
      scf.yield %28 : tensor<64x32xi32> loc(#loc7)
    } loc(#loc7)
    %4 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32> loc(#loc15)
    %5 = "tile.broadcast"(%4) : (tensor<64x1xi32>) -> tensor<64x32xi32> loc(#loc16)
    %6 = "tile.splat"(%arg1) : (i32) -> tensor<64x32xi32> loc(#loc16)
    %7 = arith.muli %5, %6 : tensor<64x32xi32> loc(#loc16)
    %8 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<32xi32>) -> tensor<1x32xi32> loc(#loc17)
    %9 = "tile.broadcast"(%8) : (tensor<1x32xi32>) -> tensor<64x32xi32> loc(#loc16)
    %10 = arith.addi %7, %9 : tensor<64x32xi32> loc(#loc16)
    %true = arith.constant true loc(#loc18)
    %11 = "tile.splat"(%true) : (i1) -> tensor<64x32xi1> loc(#loc18)
    "tile.store"(%arg0, %10, %3, %11) : (!llvm.ptr<1>, tensor<64x32xi32>, tensor<64x32xi32>, tensor<64x32xi1>) -> () loc(#loc18)
    return loc(#loc1)
  } loc(#loc1)
} loc(#loc)
#loc = loc(unknown)
#loc2 = loc("tests/kernels/margins.tile":2:16)
#loc3 = loc("tests/kernels/margins.tile":3:14)
#loc4 = loc("tests/kernels/margins.tile":4:15)
#loc5 = loc("tests/kernels/margins.tile":5:21)
#loc6 = loc("tests/kernels/margins.tile":5:27)
#loc7 = loc("tests/kernels/margins.tile":5:5)
#loc8 = loc("tests/kernels/margins.tile":6:20)
#loc9 = loc("tests/kernels/margins.tile":7:36)
#loc10 = loc("tests/kernels/margins.tile":7:52)
#loc11 = loc("tests/kernels/margins.tile":7:80)
#loc12 = loc("tests/kernels/margins.tile":7:88)
#loc13 = loc("tests/kernels/margins.tile":7:28)
#loc14 = loc("tests/kernels/margins.tile":7:15)
#loc15 = loc("tests/kernels/margins.tile":9:13)
#loc16 = loc("tests/kernels/margins.tile":9:11)
#loc17 = loc("tests/kernels/margins.tile":9:28)
#loc18 = loc("tests/kernels/margins.tile":9:5)
