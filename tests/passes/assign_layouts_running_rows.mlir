// PASS: assign-layouts gfx942
// A row vector loaded in a loop and folded into loop-carried row vectors (a running max and
// denominator, as the split-KV combine folds its splits) that meet a tile in a plain blocked
// layout, not a matrix accumulator: the load takes the tile's layout sliced along the broadcast
// axis, so the carried vectors inherit it and no conversion moves them through LDS each step.
// CHECK: scf.for
// CHECK: "tile.load"({{.*}}) -> tensor<16xf32, "slice(1,64,blocked(4))">
// CHECK-NOT: "tile.convert_layout"{{.*}}tensor<16xf32
module attributes {tile.arch = "gfx942"} {
  func.func @running_rows(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: i32, %arg3: !llvm.ptr<1>, %arg4: i32, %arg5: !llvm.ptr<1>, %arg6: i32, %arg7: i32, %arg8: i32, %arg9: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<16xi32>
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %cst = arith.constant 0xFF800000 : f32
    %2 = "tile.splat"(%cst) : (f32) -> tensor<16xf32>
    %cst_0 = arith.constant 0.000000e+00 : f32
    %3 = "tile.splat"(%cst_0) : (f32) -> tensor<16xf32>
    %cst_1 = arith.constant 0.000000e+00 : f32
    %4 = "tile.splat"(%cst_1) : (f32) -> tensor<16x64xf32>
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %5:3 = scf.for %arg10 = %c0_i32 to %arg7 step %c1_i32 iter_args(%arg11 = %3, %arg12 = %4, %arg13 = %2) -> (tensor<16xf32>, tensor<16x64xf32>, tensor<16xf32>)  : i32 {
      %17 = "tile.splat"(%arg10) : (i32) -> tensor<16xi32>
      %18 = "tile.splat"(%arg4) : (i32) -> tensor<16xi32>
      %19 = arith.muli %17, %18 : tensor<16xi32>
      %20 = arith.addi %19, %0 : tensor<16xi32>
      %true_2 = arith.constant true
      %21 = "tile.splat"(%true_2) : (i1) -> tensor<16xi1>
      %cst_3 = arith.constant 0.000000e+00 : f32
      %22 = "tile.load"(%arg3, %20, %21, %cst_3) : (!llvm.ptr<1>, tensor<16xi32>, tensor<16xi1>, f32) -> tensor<16xf32>
      %23 = arith.maxnumf %arg13, %22 : tensor<16xf32>
      %24 = arith.subf %arg13, %23 : tensor<16xf32>
      %25 = math.exp2 %24 : tensor<16xf32>
      %26 = arith.subf %22, %23 : tensor<16xf32>
      %27 = math.exp2 %26 : tensor<16xf32>
      %28 = arith.mulf %arg11, %25 : tensor<16xf32>
      %29 = arith.addf %28, %27 : tensor<16xf32>
      %30 = "tile.expand_dims"(%25) {axis = 1 : i32} : (tensor<16xf32>) -> tensor<16x1xf32>
      %31 = "tile.broadcast"(%30) : (tensor<16x1xf32>) -> tensor<16x64xf32>
      %32 = arith.mulf %arg12, %31 : tensor<16x64xf32>
      %33 = "tile.expand_dims"(%27) {axis = 1 : i32} : (tensor<16xf32>) -> tensor<16x1xf32>
      %34 = "tile.broadcast"(%33) : (tensor<16x1xf32>) -> tensor<16x64xf32>
      %35 = "tile.splat"(%arg10) : (i32) -> tensor<16x64xi32>
      %36 = "tile.splat"(%arg1) : (i32) -> tensor<16x64xi32>
      %37 = arith.muli %35, %36 : tensor<16x64xi32>
      %38 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<16xi32>) -> tensor<16x1xi32>
      %39 = "tile.broadcast"(%38) : (tensor<16x1xi32>) -> tensor<16x64xi32>
      %40 = "tile.splat"(%arg2) : (i32) -> tensor<16x64xi32>
      %41 = arith.muli %39, %40 : tensor<16x64xi32>
      %42 = arith.addi %37, %41 : tensor<16x64xi32>
      %43 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
      %44 = "tile.broadcast"(%43) : (tensor<1x64xi32>) -> tensor<16x64xi32>
      %45 = arith.addi %42, %44 : tensor<16x64xi32>
      %true_4 = arith.constant true
      %46 = "tile.splat"(%true_4) : (i1) -> tensor<16x64xi1>
      %cst_5 = arith.constant 0.000000e+00 : f32
      %47 = "tile.load"(%arg0, %45, %46, %cst_5) : (!llvm.ptr<1>, tensor<16x64xi32>, tensor<16x64xi1>, f32) -> tensor<16x64xf32>
      %48 = arith.mulf %34, %47 : tensor<16x64xf32>
      %49 = arith.addf %32, %48 : tensor<16x64xf32>
      scf.yield %29, %49, %23 : tensor<16xf32>, tensor<16x64xf32>, tensor<16xf32>
    }
    %6 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<16xi32>) -> tensor<16x1xi32>
    %7 = "tile.broadcast"(%6) : (tensor<16x1xi32>) -> tensor<16x64xi32>
    %8 = "tile.splat"(%arg6) : (i32) -> tensor<16x64xi32>
    %9 = arith.muli %7, %8 : tensor<16x64xi32>
    %10 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
    %11 = "tile.broadcast"(%10) : (tensor<1x64xi32>) -> tensor<16x64xi32>
    %12 = arith.addi %9, %11 : tensor<16x64xi32>
    %13 = "tile.expand_dims"(%5#0) {axis = 1 : i32} : (tensor<16xf32>) -> tensor<16x1xf32>
    %14 = "tile.broadcast"(%13) : (tensor<16x1xf32>) -> tensor<16x64xf32>
    %15 = arith.divf %5#1, %14 : tensor<16x64xf32>
    %true = arith.constant true
    %16 = "tile.splat"(%true) : (i1) -> tensor<16x64xi1>
    "tile.store"(%arg5, %12, %15, %16) : (!llvm.ptr<1>, tensor<16x64xi32>, tensor<16x64xf32>, tensor<16x64xi1>) -> ()
    return
  }
}
