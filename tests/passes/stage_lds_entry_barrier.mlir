// PASS: stage-lds gfx942
// A tile staged once before a loop (an attention kernel's Q) in the bytes the loop's first
// staging reuses needs a barrier before that store in the first iteration only: the loop's two
// stagings take turns in disjoint bytes, so from the second iteration on the barrier after the
// other one's store has already waited for every read. One barrier at the top of the first
// iteration takes the place of one per iteration (not one before the loop: LLVM would sink the
// tile's LDS reads, which only the loop uses, past it). (From an attention-like kernel: Q before
// the loop, K and V in it.) Q's rows stay with their wave from the coalesced layout to the
// operand, so its store is followed by a wave fence (wave-private), not a barrier.
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 36 : i32} : (tensor<64x32xf16
// CHECK-NEXT: "tile.wave_fence"
// CHECK-NEXT: "tile.local_load"
// CHECK-NOT: "tile.barrier"
// CHECK: scf.for %[[IV:[^ ]*]] = %[[LB:[^ ]*]] to
// CHECK-NEXT: %[[FIRST:.*]] = arith.cmpi eq, %[[IV]], %[[LB]] : i32
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: } else {
// CHECK-NEXT: }
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 36 : i32} : (tensor<32x32xf16
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 1152 : i32, row_stride = 36 : i32, transposed}
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK-NOT: "tile.barrier"
// CHECK: scf.yield
module attributes {tile.arch = "gfx942"} {
  func.func @attn(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: i32, %arg6: !llvm.ptr<1>, %arg7: i32, %arg8: i32, %arg9: i32, %arg10: i32, %arg11: i32, %arg12: i32, %arg13: i32, %arg14: i32, %arg15: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.program_id"() {axis = 0 : i32} : () -> i32
    %c64_i32 = arith.constant 64 : i32
    %1 = arith.muli %0, %c64_i32 : i32
    %2 = "tile.splat"(%1) : (i32) -> tensor<64xi32, "slice(1,32,blocked(8))">
    %3 = "tile.splat"(%1) : (i32) -> tensor<64xi32, "slice(1,32,acct(mfma,16,16,16,4,f16,4,1))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,blocked(8))">
    %5 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,acct(mfma,16,16,16,4,f16,4,1))">
    %6 = arith.addi %2, %4 : tensor<64xi32, "slice(1,32,blocked(8))">
    %7 = arith.addi %3, %5 : tensor<64xi32, "slice(1,32,acct(mfma,16,16,16,4,f16,4,1))">
    %8 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,blocked(8))">
    %9 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,32,blocked(8))">
    %10 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,acct(mfma,16,16,16,4,f16,4,1))">
    %11 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,32,blocked(8))">
    %12 = "tile.expand_dims"(%6) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">
    %13 = "tile.broadcast"(%12) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %14 = "tile.splat"(%arg1) : (i32) -> tensor<64x32xi32, "blocked(8)">
    %15 = arith.muli %13, %14 : tensor<64x32xi32, "blocked(8)">
    %16 = "tile.expand_dims"(%8) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">
    %17 = "tile.broadcast"(%16) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %18 = arith.addi %15, %17 : tensor<64x32xi32, "blocked(8)">
    %true = arith.constant true
    %19 = "tile.splat"(%true) : (i1) -> tensor<64x32xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %20 = "tile.load"(%arg0, %18, %19, %cst) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
    %cst_0 = arith.constant 0.000000e+00 : f32
    %21 = "tile.splat"(%cst_0) : (f32) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
    %c0_i32 = arith.constant 0 : i32
    %c32_i32 = arith.constant 32 : i32
    %22 = "tile.convert_layout"(%20) : (tensor<64x32xf16, "blocked(8)">) -> tensor<64x32xf16, "opa(mfma,16,16,16,4,f16,4,1)">
    %23 = scf.for %arg16 = %c0_i32 to %arg10 step %c32_i32 iter_args(%arg17 = %21) -> (tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">)  : i32 {
      %32 = "tile.splat"(%arg16) : (i32) -> tensor<32xi32, "slice(1,32,blocked(8))">
      %33 = arith.addi %32, %11 : tensor<32xi32, "slice(1,32,blocked(8))">
      %34 = "tile.expand_dims"(%33) {axis = 1 : i32} : (tensor<32xi32, "slice(1,32,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,32,blocked(8)))">
      %35 = "tile.broadcast"(%34) : (tensor<32x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<32x32xi32, "blocked(8)">
      %36 = "tile.splat"(%arg3) : (i32) -> tensor<32x32xi32, "blocked(8)">
      %37 = arith.muli %35, %36 : tensor<32x32xi32, "blocked(8)">
      %38 = "tile.expand_dims"(%9) {axis = 0 : i32} : (tensor<32xi32, "slice(0,32,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,32,blocked(8)))">
      %39 = "tile.broadcast"(%38) : (tensor<1x32xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x32xi32, "blocked(8)">
      %40 = arith.addi %37, %39 : tensor<32x32xi32, "blocked(8)">
      %true_2 = arith.constant true
      %41 = "tile.splat"(%true_2) : (i1) -> tensor<32x32xi1, "blocked(8)">
      %cst_3 = arith.constant 0.000000e+00 : f16
      %42 = "tile.load"(%arg2, %40, %41, %cst_3) : (!llvm.ptr<1>, tensor<32x32xi32, "blocked(8)">, tensor<32x32xi1, "blocked(8)">, f16) -> tensor<32x32xf16, "blocked(8)">
      %43 = "tile.splat"(%arg16) : (i32) -> tensor<32xi32, "slice(1,32,blocked(8))">
      %44 = arith.addi %43, %11 : tensor<32xi32, "slice(1,32,blocked(8))">
      %45 = "tile.expand_dims"(%44) {axis = 1 : i32} : (tensor<32xi32, "slice(1,32,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,32,blocked(8)))">
      %46 = "tile.broadcast"(%45) : (tensor<32x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<32x32xi32, "blocked(8)">
      %47 = "tile.splat"(%arg5) : (i32) -> tensor<32x32xi32, "blocked(8)">
      %48 = arith.muli %46, %47 : tensor<32x32xi32, "blocked(8)">
      %49 = "tile.expand_dims"(%9) {axis = 0 : i32} : (tensor<32xi32, "slice(0,32,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,32,blocked(8)))">
      %50 = "tile.broadcast"(%49) : (tensor<1x32xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x32xi32, "blocked(8)">
      %51 = arith.addi %48, %50 : tensor<32x32xi32, "blocked(8)">
      %true_4 = arith.constant true
      %52 = "tile.splat"(%true_4) : (i1) -> tensor<32x32xi1, "blocked(8)">
      %cst_5 = arith.constant 0.000000e+00 : f16
      %53 = "tile.load"(%arg4, %51, %52, %cst_5) : (!llvm.ptr<1>, tensor<32x32xi32, "blocked(8)">, tensor<32x32xi1, "blocked(8)">, f16) -> tensor<32x32xf16, "blocked(8)">
      %cst_6 = arith.constant 0.000000e+00 : f32
      %54 = "tile.splat"(%cst_6) : (f32) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
      %55 = "tile.convert_layout"(%42) : (tensor<32x32xf16, "blocked(8)">) -> tensor<32x32xf16, "opbt(mfma,16,16,16,4,f16,4,1)">
      %56 = "tile.dot"(%22, %55, %54) {trans_b = true} : (tensor<64x32xf16, "opa(mfma,16,16,16,4,f16,4,1)">, tensor<32x32xf16, "opbt(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
      %57 = arith.truncf %56 : tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)"> to tensor<64x32xf16, "acct(mfma,16,16,16,4,f16,4,1)">
      %58 = "tile.convert_layout"(%57) : (tensor<64x32xf16, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x32xf16, "opa(mfma,16,16,16,4,f16,4,1)">
      %59 = "tile.convert_layout"(%53) : (tensor<32x32xf16, "blocked(8)">) -> tensor<32x32xf16, "opb(mfma,16,16,16,4,f16,4,1)">
      %60 = "tile.dot"(%58, %59, %arg17) {trans_b = false} : (tensor<64x32xf16, "opa(mfma,16,16,16,4,f16,4,1)">, tensor<32x32xf16, "opb(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">) -> tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
      scf.yield %60 : tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">
    }
    %24 = "tile.expand_dims"(%7) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,acct(mfma,16,16,16,4,f16,4,1))">) -> tensor<64x1xi32, "expand(1,slice(1,32,acct(mfma,16,16,16,4,f16,4,1)))">
    %25 = "tile.broadcast"(%24) : (tensor<64x1xi32, "expand(1,slice(1,32,acct(mfma,16,16,16,4,f16,4,1)))">) -> tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %26 = "tile.splat"(%arg7) : (i32) -> tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %27 = arith.muli %25, %26 : tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %28 = "tile.expand_dims"(%10) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,acct(mfma,16,16,16,4,f16,4,1))">) -> tensor<1x32xi32, "expand(0,slice(0,64,acct(mfma,16,16,16,4,f16,4,1)))">
    %29 = "tile.broadcast"(%28) : (tensor<1x32xi32, "expand(0,slice(0,64,acct(mfma,16,16,16,4,f16,4,1)))">) -> tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %30 = arith.addi %27, %29 : tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">
    %true_1 = arith.constant true
    %31 = "tile.splat"(%true_1) : (i1) -> tensor<64x32xi1, "acct(mfma,16,16,16,4,f16,4,1)">
    "tile.store"(%arg6, %30, %23, %31) : (!llvm.ptr<1>, tensor<64x32xi32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,16,4,f16,4,1)">, tensor<64x32xi1, "acct(mfma,16,16,16,4,f16,4,1)">) -> ()
    return
  }
}
