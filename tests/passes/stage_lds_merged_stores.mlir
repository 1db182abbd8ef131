// PASS: stage-lds gfx942 merge_stores=true
// A loop whose first staging (B, a look-ahead tile loaded a step ahead) has a later one's tile
// at hand (C, also loaded a step ahead): C's store joins B's, before its barrier, and C is read
// where it is used, after S's staging, without a barrier of its own. The arena grows to the loop's
// stagings together (22016 bytes; the kernel's occupancy target of 2 still fits), B and C take
// consecutive bytes and S's staging keeps clear of C's until C is read. C's reads come after the
// last barrier of the step, so the next step's stores wait for them. (From
// tests/kernels/merged_three.tile.)
// CHECK: tile.lds_bytes = 22016
// CHECK: scf.for
// CHECK: "tile.barrier"
// CHECK-NEXT: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 132 : i32} : (tensor<32x128xf16
// CHECK-NEXT: "tile.local_store"(%{{.*}}) {offset = 4224 : i32, row_stride = 36 : i32, transposed} : (tensor<32x128xf16
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"() {offset = 0 : i32, row_stride = 132 : i32}
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 8832 : i32, row_stride = 68 : i32, transposed} : (tensor<64x32xf16
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"() {offset = 8832 : i32
// CHECK-NOT: "tile.barrier"
// CHECK-NOT: "tile.local_store"
// CHECK: "tile.local_load"() {offset = 4224 : i32, row_stride = 36 : i32, transposed}
// CHECK-NOT: "tile.barrier"
// CHECK: scf.yield
module attributes {tile.arch = "gfx942"} {
  func.func @merged_three(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: i32, %arg6: !llvm.ptr<1>, %arg7: i32, %arg8: !llvm.ptr<1>, %arg9: i32, %arg10: !llvm.ptr<1>, %arg11: i32, %arg12: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.nonnegative_args = array<i32: 1, 3, 5, 7, 9, 11, 12>, tile.occupancy = 2 : i32, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,128,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,blocked(8))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,blocked(8))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,128,acct(mfma,16,16,16,4,f16,4,1))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,acct(mfma,16,16,16,4,f16,4,1))">
    %5 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,64,blocked(8))">
    %6 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,32,blocked(8))">
    %7 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,32,blocked(8,2))">
    %8 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,64,acct(mfma,16,16,16,4,f16,4,1))">
    %9 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,128,blocked(8))">
    %10 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,128,blocked(8,2))">
    %11 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,acct(mfma,16,16,16,4,f16,4,1))">
    %12 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,128,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,128,blocked(8)))">
    %13 = "tile.broadcast"(%12) : (tensor<64x1xi32, "expand(1,slice(1,128,blocked(8)))">) -> tensor<64x128xi32, "blocked(8)">
    %14 = "tile.splat"(%arg1) : (i32) -> tensor<64x128xi32, "blocked(8)">
    %15 = arith.muli %13, %14 : tensor<64x128xi32, "blocked(8)">
    %16 = "tile.expand_dims"(%5) {axis = 0 : i32} : (tensor<128xi32, "slice(0,64,blocked(8))">) -> tensor<1x128xi32, "expand(0,slice(0,64,blocked(8)))">
    %17 = "tile.broadcast"(%16) : (tensor<1x128xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x128xi32, "blocked(8)">
    %18 = arith.addi %15, %17 : tensor<64x128xi32, "blocked(8)">
    %true = arith.constant true
    %19 = "tile.splat"(%true) : (i1) -> tensor<64x128xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %20 = "tile.load"(%arg0, %18, %19, %cst) : (!llvm.ptr<1>, tensor<64x128xi32, "blocked(8)">, tensor<64x128xi1, "blocked(8)">, f16) -> tensor<64x128xf16, "blocked(8)">
    %21 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %22 = "tile.broadcast"(%21) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %23 = "tile.splat"(%arg7) : (i32) -> tensor<64x64xi32, "blocked(8)">
    %24 = arith.muli %22, %23 : tensor<64x64xi32, "blocked(8)">
    %25 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">
    %26 = "tile.broadcast"(%25) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %27 = arith.addi %24, %26 : tensor<64x64xi32, "blocked(8)">
    %true_0 = arith.constant true
    %28 = "tile.splat"(%true_0) : (i1) -> tensor<64x64xi1, "blocked(8)">
    %cst_1 = arith.constant 0.000000e+00 : f16
    %29 = "tile.load"(%arg6, %27, %28, %cst_1) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(8)">, tensor<64x64xi1, "blocked(8)">, f16) -> tensor<64x64xf16, "blocked(8)">
    %cst_2 = arith.constant 0.000000e+00 : f32
    %30 = "tile.splat"(%cst_2) : (f32) -> tensor<64x128xf32, "acct(mfma,16,16,16,4,f16,4,1)">
    %cst_3 = arith.constant 0.000000e+00 : f32
    %31 = "tile.splat"(%cst_3) : (f32) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
    %c0_i32 = arith.constant 0 : i32
    %c32_i32 = arith.constant 32 : i32
    %32 = "tile.convert_layout"(%20) : (tensor<64x128xf16, "blocked(8)">) -> tensor<64x128xf16, "opa(mfma,16,16,16,4,f16,4,1)">
    %33 = "tile.convert_layout"(%29) : (tensor<64x64xf16, "blocked(8)">) -> tensor<64x64xf16, "opa(mfma,16,16,16,4,f16,4,1)">
    %c0_i32_4 = arith.constant 0 : i32
    %34 = arith.muli %c32_i32, %c0_i32_4 : i32
    %35 = arith.addi %c0_i32, %34 : i32
    %36 = "tile.splat"(%35) : (i32) -> tensor<32xi32, "slice(1,128,blocked(8))">
    %37 = arith.addi %36, %9 : tensor<32xi32, "slice(1,128,blocked(8))">
    %38 = "tile.expand_dims"(%37) {axis = 1 : i32} : (tensor<32xi32, "slice(1,128,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,128,blocked(8)))">
    %39 = "tile.broadcast"(%38) : (tensor<32x1xi32, "expand(1,slice(1,128,blocked(8)))">) -> tensor<32x128xi32, "blocked(8)">
    %40 = "tile.splat"(%arg3) : (i32) -> tensor<32x128xi32, "blocked(8)">
    %41 = arith.muli %39, %40 : tensor<32x128xi32, "blocked(8)">
    %42 = "tile.expand_dims"(%6) {axis = 0 : i32} : (tensor<128xi32, "slice(0,32,blocked(8))">) -> tensor<1x128xi32, "expand(0,slice(0,32,blocked(8)))">
    %43 = "tile.broadcast"(%42) : (tensor<1x128xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x128xi32, "blocked(8)">
    %44 = arith.addi %41, %43 : tensor<32x128xi32, "blocked(8)">
    %true_5 = arith.constant true
    %45 = "tile.splat"(%true_5) : (i1) -> tensor<32x128xi1, "blocked(8)">
    %cst_6 = arith.constant 0.000000e+00 : f16
    %46 = arith.cmpi slt, %35, %arg12 : i32
    %47 = "tile.splat"(%46) : (i1) -> tensor<32x128xi1, "blocked(8)">
    %48 = arith.andi %45, %47 : tensor<32x128xi1, "blocked(8)">
    %49 = "tile.load"(%arg2, %44, %48, %cst_6) : (!llvm.ptr<1>, tensor<32x128xi32, "blocked(8)">, tensor<32x128xi1, "blocked(8)">, f16) -> tensor<32x128xf16, "blocked(8)">
    %50 = "tile.splat"(%35) : (i32) -> tensor<32xi32, "slice(1,128,blocked(8,2))">
    %51 = arith.addi %50, %10 : tensor<32xi32, "slice(1,128,blocked(8,2))">
    %52 = "tile.expand_dims"(%51) {axis = 1 : i32} : (tensor<32xi32, "slice(1,128,blocked(8,2))">) -> tensor<32x1xi32, "expand(1,slice(1,128,blocked(8,2)))">
    %53 = "tile.broadcast"(%52) : (tensor<32x1xi32, "expand(1,slice(1,128,blocked(8,2)))">) -> tensor<32x128xi32, "blocked(8,2)">
    %54 = "tile.splat"(%arg5) : (i32) -> tensor<32x128xi32, "blocked(8,2)">
    %55 = arith.muli %53, %54 : tensor<32x128xi32, "blocked(8,2)">
    %56 = "tile.expand_dims"(%7) {axis = 0 : i32} : (tensor<128xi32, "slice(0,32,blocked(8,2))">) -> tensor<1x128xi32, "expand(0,slice(0,32,blocked(8,2)))">
    %57 = "tile.broadcast"(%56) : (tensor<1x128xi32, "expand(0,slice(0,32,blocked(8,2)))">) -> tensor<32x128xi32, "blocked(8,2)">
    %58 = arith.addi %55, %57 : tensor<32x128xi32, "blocked(8,2)">
    %true_7 = arith.constant true
    %59 = "tile.splat"(%true_7) : (i1) -> tensor<32x128xi1, "blocked(8,2)">
    %cst_8 = arith.constant 0.000000e+00 : f16
    %60 = arith.cmpi slt, %35, %arg12 : i32
    %61 = "tile.splat"(%60) : (i1) -> tensor<32x128xi1, "blocked(8,2)">
    %62 = arith.andi %59, %61 : tensor<32x128xi1, "blocked(8,2)">
    %63 = "tile.load"(%arg4, %58, %62, %cst_8) : (!llvm.ptr<1>, tensor<32x128xi32, "blocked(8,2)">, tensor<32x128xi1, "blocked(8,2)">, f16) -> tensor<32x128xf16, "blocked(8,2)">
    %c1_i32 = arith.constant 1 : i32
    %64 = arith.subi %arg12, %c0_i32 : i32
    %65 = arith.subi %64, %c1_i32 : i32
    %66 = arith.divsi %65, %c32_i32 : i32
    %67 = arith.muli %66, %c32_i32 : i32
    %68 = arith.addi %c0_i32, %67 : i32
    %69:4 = scf.for %arg13 = %c0_i32 to %arg12 step %c32_i32 iter_args(%arg14 = %31, %arg15 = %30, %arg16 = %49, %arg17 = %63) -> (tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x128xf32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<32x128xf16, "blocked(8)">, tensor<32x128xf16, "blocked(8,2)">)  : i32 {
      %c1_i32_11 = arith.constant 1 : i32
      %86 = arith.muli %c32_i32, %c1_i32_11 : i32
      %87 = arith.addi %arg13, %86 : i32
      %88 = arith.minsi %87, %68 : i32
      %89 = "tile.splat"(%88) : (i32) -> tensor<32xi32, "slice(1,128,blocked(8))">
      %90 = arith.addi %89, %9 : tensor<32xi32, "slice(1,128,blocked(8))">
      %91 = "tile.expand_dims"(%90) {axis = 1 : i32} : (tensor<32xi32, "slice(1,128,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,128,blocked(8)))">
      %92 = "tile.broadcast"(%91) : (tensor<32x1xi32, "expand(1,slice(1,128,blocked(8)))">) -> tensor<32x128xi32, "blocked(8)">
      %93 = "tile.splat"(%arg3) : (i32) -> tensor<32x128xi32, "blocked(8)">
      %94 = arith.muli %92, %93 : tensor<32x128xi32, "blocked(8)">
      %95 = "tile.expand_dims"(%6) {axis = 0 : i32} : (tensor<128xi32, "slice(0,32,blocked(8))">) -> tensor<1x128xi32, "expand(0,slice(0,32,blocked(8)))">
      %96 = "tile.broadcast"(%95) : (tensor<1x128xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x128xi32, "blocked(8)">
      %97 = arith.addi %94, %96 : tensor<32x128xi32, "blocked(8)">
      %true_12 = arith.constant true
      %98 = "tile.splat"(%true_12) : (i1) -> tensor<32x128xi1, "blocked(8)">
      %cst_13 = arith.constant 0.000000e+00 : f16
      %99 = "tile.load"(%arg2, %97, %98, %cst_13) : (!llvm.ptr<1>, tensor<32x128xi32, "blocked(8)">, tensor<32x128xi1, "blocked(8)">, f16) -> tensor<32x128xf16, "blocked(8)">
      %100 = "tile.splat"(%88) : (i32) -> tensor<32xi32, "slice(1,128,blocked(8,2))">
      %101 = arith.addi %100, %10 : tensor<32xi32, "slice(1,128,blocked(8,2))">
      %102 = "tile.expand_dims"(%101) {axis = 1 : i32} : (tensor<32xi32, "slice(1,128,blocked(8,2))">) -> tensor<32x1xi32, "expand(1,slice(1,128,blocked(8,2)))">
      %103 = "tile.broadcast"(%102) : (tensor<32x1xi32, "expand(1,slice(1,128,blocked(8,2)))">) -> tensor<32x128xi32, "blocked(8,2)">
      %104 = "tile.splat"(%arg5) : (i32) -> tensor<32x128xi32, "blocked(8,2)">
      %105 = arith.muli %103, %104 : tensor<32x128xi32, "blocked(8,2)">
      %106 = "tile.expand_dims"(%7) {axis = 0 : i32} : (tensor<128xi32, "slice(0,32,blocked(8,2))">) -> tensor<1x128xi32, "expand(0,slice(0,32,blocked(8,2)))">
      %107 = "tile.broadcast"(%106) : (tensor<1x128xi32, "expand(0,slice(0,32,blocked(8,2)))">) -> tensor<32x128xi32, "blocked(8,2)">
      %108 = arith.addi %105, %107 : tensor<32x128xi32, "blocked(8,2)">
      %true_14 = arith.constant true
      %109 = "tile.splat"(%true_14) : (i1) -> tensor<32x128xi1, "blocked(8,2)">
      %cst_15 = arith.constant 0.000000e+00 : f16
      %110 = "tile.load"(%arg4, %108, %109, %cst_15) : (!llvm.ptr<1>, tensor<32x128xi32, "blocked(8,2)">, tensor<32x128xi1, "blocked(8,2)">, f16) -> tensor<32x128xf16, "blocked(8,2)">
      %cst_16 = arith.constant 0.000000e+00 : f32
      %111 = "tile.splat"(%cst_16) : (f32) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
      %112 = "tile.convert_layout"(%arg16) : (tensor<32x128xf16, "blocked(8)">) -> tensor<32x128xf16, "opbt(mfma,16,16,16,4,f16,4,1)">
      %113 = "tile.dot"(%32, %112, %111) {trans_b = true} : (tensor<64x128xf16, "opa(mfma,16,16,16,4,f16,4,1)">, tensor<32x128xf16, "opbt(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
      %114 = arith.truncf %113 : tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)"> to tensor<64x32xf16, "acct(mfma,16,16,16,4,f16,4,1)">
      %115 = "tile.convert_layout"(%114) : (tensor<64x32xf16, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x32xf16, "opb(mfma,16,16,16,4,f16,4,1)">
      %116 = "tile.dot"(%33, %115, %arg14) {trans_b = false} : (tensor<64x64xf16, "opa(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xf16, "opb(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
      %117 = "tile.convert_layout"(%114) : (tensor<64x32xf16, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x32xf16, "opa(mfma,16,16,16,4,f16,4,1)">
      %118 = "tile.convert_layout"(%arg17) : (tensor<32x128xf16, "blocked(8,2)">) -> tensor<32x128xf16, "opb(mfma,16,16,16,4,f16,4,1)">
      %119 = "tile.dot"(%117, %118, %arg15) {trans_b = false} : (tensor<64x32xf16, "opa(mfma,16,16,16,4,f16,4,1)">, tensor<32x128xf16, "opb(mfma,16,16,16,4,f16,4,1)">, tensor<64x128xf32, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x128xf32, "acct(mfma,16,16,16,4,f16,4,1)">
      scf.yield %116, %119, %99, %110 : tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x128xf32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<32x128xf16, "blocked(8)">, tensor<32x128xf16, "blocked(8,2)">
    } {tile.pipelined = 2 : i32}
    %70 = "tile.expand_dims"(%3) {axis = 1 : i32} : (tensor<64xi32, "slice(1,128,acct(mfma,16,16,16,4,f16,4,1))">) -> tensor<64x1xi32, "expand(1,slice(1,128,acct(mfma,16,16,16,4,f16,4,1)))">
    %71 = "tile.broadcast"(%70) : (tensor<64x1xi32, "expand(1,slice(1,128,acct(mfma,16,16,16,4,f16,4,1)))">) -> tensor<64x128xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %72 = "tile.splat"(%arg9) : (i32) -> tensor<64x128xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %73 = arith.muli %71, %72 : tensor<64x128xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %74 = "tile.expand_dims"(%8) {axis = 0 : i32} : (tensor<128xi32, "slice(0,64,acct(mfma,16,16,16,4,f16,4,1))">) -> tensor<1x128xi32, "expand(0,slice(0,64,acct(mfma,16,16,16,4,f16,4,1)))">
    %75 = "tile.broadcast"(%74) : (tensor<1x128xi32, "expand(0,slice(0,64,acct(mfma,16,16,16,4,f16,4,1)))">) -> tensor<64x128xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %76 = arith.addi %73, %75 : tensor<64x128xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %true_9 = arith.constant true
    %77 = "tile.splat"(%true_9) : (i1) -> tensor<64x128xi1, "acct(mfma,16,16,16,4,f16,4,1)">
    "tile.store"(%arg8, %76, %69#1, %77) : (!llvm.ptr<1>, tensor<64x128xi32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x128xf32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x128xi1, "acct(mfma,16,16,16,4,f16,4,1)">) -> ()
    %78 = "tile.expand_dims"(%4) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,acct(mfma,16,16,16,4,f16,4,1))">) -> tensor<64x1xi32, "expand(1,slice(1,32,acct(mfma,16,16,16,4,f16,4,1)))">
    %79 = "tile.broadcast"(%78) : (tensor<64x1xi32, "expand(1,slice(1,32,acct(mfma,16,16,16,4,f16,4,1)))">) -> tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %80 = "tile.splat"(%arg11) : (i32) -> tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %81 = arith.muli %79, %80 : tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %82 = "tile.expand_dims"(%11) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,acct(mfma,16,16,16,4,f16,4,1))">) -> tensor<1x32xi32, "expand(0,slice(0,64,acct(mfma,16,16,16,4,f16,4,1)))">
    %83 = "tile.broadcast"(%82) : (tensor<1x32xi32, "expand(0,slice(0,64,acct(mfma,16,16,16,4,f16,4,1)))">) -> tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %84 = arith.addi %81, %83 : tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %true_10 = arith.constant true
    %85 = "tile.splat"(%true_10) : (i1) -> tensor<64x32xi1, "acct(mfma,16,16,16,4,f16,4,1)">
    "tile.store"(%arg10, %84, %69#0, %85) : (!llvm.ptr<1>, tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xi1, "acct(mfma,16,16,16,4,f16,4,1)">) -> ()
    return
  }
}
