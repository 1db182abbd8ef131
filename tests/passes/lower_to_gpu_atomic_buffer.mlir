// PASS: lower-to-gpu gfx90a
// f32 atomic adds go through a buffer descriptor: a 32-bit byte offset per element (column
// deltas as constants that fold into the instruction's offset field), and a masked-off row's
// offset selected out of range (2 GiB) instead of a branch.
// CHECK-NOT: llvm.atomicrmw
// CHECK-NOT: scf.if
// CHECK: rocdl.make.buffer.rsrc
// CHECK: rocdl.raw.ptr.buffer.atomic.fadd
// CHECK: arith.select %{{.*}}, %{{.*}}, %c-2147483648_i32
// CHECK: rocdl.raw.ptr.buffer.atomic.fadd
// CHECK-NOT: llvm.atomicrmw
// CHECK-NOT: scf.if
#loc1 = loc("tests/passes/atomic_rows.tile":1:1)
module attributes {tile.arch = "gfx90a", tile.lds_arena = 0 : i32, tile.lds_bytes = 0 : i32} {
  func.func @atomic_rows(%arg0: !llvm.ptr<1> loc("tests/passes/atomic_rows.tile":1:1), %arg1: i32 loc("tests/passes/atomic_rows.tile":1:1), %arg2: !llvm.ptr<1> loc("tests/passes/atomic_rows.tile":1:1), %arg3: i32 loc("tests/passes/atomic_rows.tile":1:1), %arg4: i32 loc("tests/passes/atomic_rows.tile":1:1)) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,blocked(4))"> loc(#loc2)
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,blocked(4))"> loc(#loc3)
    %2 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(4))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(4)))"> loc(#loc4)
    %3 = "tile.broadcast"(%2) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(4)))">) -> tensor<64x32xi32, "blocked(4)"> loc(#loc5)
    %4 = "tile.splat"(%arg1) : (i32) -> tensor<64x32xi32, "blocked(4)"> loc(#loc5)
    %5 = arith.muli %3, %4 : tensor<64x32xi32, "blocked(4)"> loc(#loc5)
    %6 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(4))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(4)))"> loc(#loc6)
    %7 = "tile.broadcast"(%6) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(4)))">) -> tensor<64x32xi32, "blocked(4)"> loc(#loc5)
    %8 = arith.addi %5, %7 : tensor<64x32xi32, "blocked(4)"> loc(#loc5)
    %true = arith.constant true loc(#loc7)
    %9 = "tile.splat"(%true) : (i1) -> tensor<64x32xi1, "blocked(4)"> loc(#loc7)
    %cst = arith.constant 0.000000e+00 : f32 loc(#loc7)
    %10 = "tile.load"(%arg0, %8, %9, %cst) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(4)">, tensor<64x32xi1, "blocked(4)">, f32) -> tensor<64x32xf32, "blocked(4)"> loc(#loc7)
    %11 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(4))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(4)))"> loc(#loc8)
    %12 = "tile.broadcast"(%11) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(4)))">) -> tensor<64x32xi32, "blocked(4)"> loc(#loc9)
    %13 = "tile.splat"(%arg3) : (i32) -> tensor<64x32xi32, "blocked(4)"> loc(#loc9)
    %14 = arith.muli %12, %13 : tensor<64x32xi32, "blocked(4)"> loc(#loc9)
    %15 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(4))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(4)))"> loc(#loc10)
    %16 = "tile.broadcast"(%15) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(4)))">) -> tensor<64x32xi32, "blocked(4)"> loc(#loc9)
    %17 = arith.addi %14, %16 : tensor<64x32xi32, "blocked(4)"> loc(#loc9)
    %true_0 = arith.constant true loc(#loc11)
    %18 = "tile.splat"(%true_0) : (i1) -> tensor<64x32xi1, "blocked(4)"> loc(#loc11)
    "tile.atomic_add"(%arg2, %17, %10, %18) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(4)">, tensor<64x32xf32, "blocked(4)">, tensor<64x32xi1, "blocked(4)">) -> () loc(#loc11)
    %19 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(4))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(4)))"> loc(#loc12)
    %20 = "tile.broadcast"(%19) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(4)))">) -> tensor<64x32xi32, "blocked(4)"> loc(#loc13)
    %21 = "tile.splat"(%arg3) : (i32) -> tensor<64x32xi32, "blocked(4)"> loc(#loc13)
    %22 = arith.muli %20, %21 : tensor<64x32xi32, "blocked(4)"> loc(#loc13)
    %23 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(4))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(4)))"> loc(#loc14)
    %24 = "tile.broadcast"(%23) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(4)))">) -> tensor<64x32xi32, "blocked(4)"> loc(#loc13)
    %25 = arith.addi %22, %24 : tensor<64x32xi32, "blocked(4)"> loc(#loc13)
    %26 = "tile.splat"(%arg4) : (i32) -> tensor<64xi32, "slice(1,32,blocked(4))"> loc(#loc15)
    %27 = arith.cmpi slt, %0, %26 : tensor<64xi32, "slice(1,32,blocked(4))"> loc(#loc15)
    %28 = "tile.expand_dims"(%27) {axis = 1 : i32} : (tensor<64xi1, "slice(1,32,blocked(4))">) -> tensor<64x1xi1, "expand(1,slice(1,32,blocked(4)))"> loc(#loc16)
    %29 = "tile.broadcast"(%28) : (tensor<64x1xi1, "expand(1,slice(1,32,blocked(4)))">) -> tensor<64x32xi1, "blocked(4)"> loc(#loc17)
    "tile.atomic_add"(%arg2, %25, %10, %29) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(4)">, tensor<64x32xf32, "blocked(4)">, tensor<64x32xi1, "blocked(4)">) -> () loc(#loc17)
    return loc(#loc1)
  } loc(#loc1)
} loc(#loc)
#loc = loc(unknown)
#loc2 = loc("tests/passes/atomic_rows.tile":2:16)
#loc3 = loc("tests/passes/atomic_rows.tile":3:16)
#loc4 = loc("tests/passes/atomic_rows.tile":4:20)
#loc5 = loc("tests/passes/atomic_rows.tile":4:18)
#loc6 = loc("tests/passes/atomic_rows.tile":4:35)
#loc7 = loc("tests/passes/atomic_rows.tile":4:13)
#loc8 = loc("tests/passes/atomic_rows.tile":5:20)
#loc9 = loc("tests/passes/atomic_rows.tile":5:16)
#loc10 = loc("tests/passes/atomic_rows.tile":5:35)
#loc11 = loc("tests/passes/atomic_rows.tile":5:5)
#loc12 = loc("tests/passes/atomic_rows.tile":6:20)
#loc13 = loc("tests/passes/atomic_rows.tile":6:16)
#loc14 = loc("tests/passes/atomic_rows.tile":6:35)
#loc15 = loc("tests/passes/atomic_rows.tile":6:60)
#loc16 = loc("tests/passes/atomic_rows.tile":6:59)
#loc17 = loc("tests/passes/atomic_rows.tile":6:5)
