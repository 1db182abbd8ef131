// PASS: assign-layouts gfx942
// A per-column vector loaded once and combined with a dot's accumulator after expand_dims and
// broadcast (the backward's LSE and D beside the scores) is loaded in the accumulator's layout
// sliced along the expanded axis: each lane loads the values of its own columns (lanes that share
// columns load the same ones), and no conversion moves it between lanes through LDS.
// CHECK: "tile.load"({{.*}}) -> tensor<32xf32, "slice(0,64,acct(mfma,16,16,16,4,f16,4,1))">
// CHECK-NOT: "tile.convert_layout"{{.*}}xf32
module attributes {tile.arch = "gfx942"} {
  func.func @rowvec(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: !llvm.ptr<1>, %arg6: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32>
    %cst = arith.constant 0.000000e+00 : f32
    %2 = "tile.splat"(%cst) : (f32) -> tensor<64x32xf32>
    %3 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32>
    %4 = "tile.broadcast"(%3) : (tensor<64x1xi32>) -> tensor<64x64xi32>
    %5 = "tile.splat"(%arg1) : (i32) -> tensor<64x64xi32>
    %6 = arith.muli %4, %5 : tensor<64x64xi32>
    %7 = "tile.expand_dims"(%0) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
    %8 = "tile.broadcast"(%7) : (tensor<1x64xi32>) -> tensor<64x64xi32>
    %9 = arith.addi %6, %8 : tensor<64x64xi32>
    %true = arith.constant true
    %10 = "tile.splat"(%true) : (i1) -> tensor<64x64xi1>
    %cst_0 = arith.constant 0.000000e+00 : f16
    %11 = "tile.load"(%arg0, %9, %10, %cst_0) : (!llvm.ptr<1>, tensor<64x64xi32>, tensor<64x64xi1>, f16) -> tensor<64x64xf16>
    %12 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<32xi32>) -> tensor<32x1xi32>
    %13 = "tile.broadcast"(%12) : (tensor<32x1xi32>) -> tensor<32x64xi32>
    %14 = "tile.splat"(%arg3) : (i32) -> tensor<32x64xi32>
    %15 = arith.muli %13, %14 : tensor<32x64xi32>
    %16 = "tile.expand_dims"(%0) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
    %17 = "tile.broadcast"(%16) : (tensor<1x64xi32>) -> tensor<32x64xi32>
    %18 = arith.addi %15, %17 : tensor<32x64xi32>
    %true_1 = arith.constant true
    %19 = "tile.splat"(%true_1) : (i1) -> tensor<32x64xi1>
    %cst_2 = arith.constant 0.000000e+00 : f16
    %20 = "tile.load"(%arg2, %18, %19, %cst_2) : (!llvm.ptr<1>, tensor<32x64xi32>, tensor<32x64xi1>, f16) -> tensor<32x64xf16>
    %21 = "tile.dot"(%11, %20, %2) {trans_b = true} : (tensor<64x64xf16>, tensor<32x64xf16>, tensor<64x32xf32>) -> tensor<64x32xf32>
    %true_3 = arith.constant true
    %22 = "tile.splat"(%true_3) : (i1) -> tensor<32xi1>
    %cst_4 = arith.constant 0.000000e+00 : f32
    %23 = "tile.load"(%arg4, %1, %22, %cst_4) : (!llvm.ptr<1>, tensor<32xi32>, tensor<32xi1>, f32) -> tensor<32xf32>
    %cst_5 = arith.constant 0xFF800000 : f32
    %24 = "tile.splat"(%cst_5) : (f32) -> tensor<32xf32>
    %25 = arith.cmpf oeq, %23, %24 : tensor<32xf32>
    %cst_6 = arith.constant 0x7F800000 : f32
    %26 = "tile.splat"(%cst_6) : (f32) -> tensor<32xf32>
    %cst_7 = arith.constant 2.000000e+00 : f32
    %27 = "tile.splat"(%cst_7) : (f32) -> tensor<32xf32>
    %28 = arith.mulf %23, %27 : tensor<32xf32>
    %29 = arith.select %25, %26, %28 : tensor<32xi1>, tensor<32xf32>
    %30 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32>
    %31 = "tile.broadcast"(%30) : (tensor<64x1xi32>) -> tensor<64x32xi32>
    %32 = "tile.splat"(%arg6) : (i32) -> tensor<64x32xi32>
    %33 = arith.muli %31, %32 : tensor<64x32xi32>
    %34 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<32xi32>) -> tensor<1x32xi32>
    %35 = "tile.broadcast"(%34) : (tensor<1x32xi32>) -> tensor<64x32xi32>
    %36 = arith.addi %33, %35 : tensor<64x32xi32>
    %37 = "tile.expand_dims"(%29) {axis = 0 : i32} : (tensor<32xf32>) -> tensor<1x32xf32>
    %38 = "tile.broadcast"(%37) : (tensor<1x32xf32>) -> tensor<64x32xf32>
    %39 = arith.subf %21, %38 : tensor<64x32xf32>
    %40 = math.exp2 %39 : tensor<64x32xf32>
    %true_8 = arith.constant true
    %41 = "tile.splat"(%true_8) : (i1) -> tensor<64x32xi1>
    "tile.store"(%arg5, %36, %40, %41) : (!llvm.ptr<1>, tensor<64x32xi32>, tensor<64x32xf32>, tensor<64x32xi1>) -> ()
    return
  }
}
