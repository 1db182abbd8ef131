// PASS: stage-lds gfx1201 loop_arena=true lds_swizzle=false
// A loop whose two stagings together outgrow the arena that a tile staged before it set (an
// attention forward's Q [64, 128] 16896 bytes; K [32, 128] 8448 and V^T 9216 in the loop): the
// arena grows to 17664 bytes, which still leaves three 4-wave workgroups per compute unit in
// gfx1201's 64 KiB, so K and V each get bytes of their own and neither store needs a barrier
// before it in the loop (the other staging's barrier already waited for every read). In Q's
// 16896 bytes both would start at 0, behind two barriers each (offsets count f16 elements: V^T at
// byte 8448). The loop's first iteration still waits once for Q's reads. (From tests/kernels/staged_pair.tile.)
// With padded rows: V^T swizzled instead (lds_swizzle, stage_lds_arena_kept_gfx1100.mlir) takes
// 8192 bytes, and K and V fit Q's arena.
// CHECK: tile.lds_bytes = 17664
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 132 : i32} : (tensor<64x128xf16
// CHECK-NEXT: "tile.barrier"
// CHECK: scf.for %[[IV:[^ ]*]] = %[[LB:[^ ]*]] to
// CHECK-NEXT: %[[FIRST:.*]] = arith.cmpi eq, %[[IV]], %[[LB]] : i32
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: } else {
// CHECK-NEXT: }
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 132 : i32} : (tensor<32x128xf16
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 4224 : i32, row_stride = 36 : i32, transposed}
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK-NOT: "tile.barrier"
// CHECK: scf.yield
module attributes {tile.arch = "gfx1201"} {
  func.func @staged_pair(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: i32, %arg6: !llvm.ptr<1>, %arg7: i32, %arg8: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.nonnegative_args = array<i32: 1, 3, 5, 7, 8>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,128,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,128,acct(wmma_gfx12,16,16,16,8,f16,4,1))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,64,blocked(8))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,32,blocked(8))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,32,blocked(8,2))">
    %5 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(0,64,acct(wmma_gfx12,16,16,16,8,f16,4,1))">
    %6 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,128,blocked(8))">
    %7 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,128,blocked(8,2))">
    %8 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,128,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,128,blocked(8)))">
    %9 = "tile.broadcast"(%8) : (tensor<64x1xi32, "expand(1,slice(1,128,blocked(8)))">) -> tensor<64x128xi32, "blocked(8)">
    %10 = "tile.splat"(%arg1) : (i32) -> tensor<64x128xi32, "blocked(8)">
    %11 = arith.muli %9, %10 : tensor<64x128xi32, "blocked(8)">
    %12 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<128xi32, "slice(0,64,blocked(8))">) -> tensor<1x128xi32, "expand(0,slice(0,64,blocked(8)))">
    %13 = "tile.broadcast"(%12) : (tensor<1x128xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x128xi32, "blocked(8)">
    %14 = arith.addi %11, %13 : tensor<64x128xi32, "blocked(8)">
    %true = arith.constant true
    %15 = "tile.splat"(%true) : (i1) -> tensor<64x128xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %16 = "tile.load"(%arg0, %14, %15, %cst) : (!llvm.ptr<1>, tensor<64x128xi32, "blocked(8)">, tensor<64x128xi1, "blocked(8)">, f16) -> tensor<64x128xf16, "blocked(8)">
    %cst_0 = arith.constant 0.000000e+00 : f32
    %17 = "tile.splat"(%cst_0) : (f32) -> tensor<64x128xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    %c0_i32 = arith.constant 0 : i32
    %c32_i32 = arith.constant 32 : i32
    %18 = "tile.convert_layout"(%16) : (tensor<64x128xf16, "blocked(8)">) -> tensor<64x128xf16, "opa(wmma_gfx12,16,16,16,8,f16,4,1)">
    %19 = scf.for %arg9 = %c0_i32 to %arg8 step %c32_i32 iter_args(%arg10 = %17) -> (tensor<64x128xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">)  : i32 {
      %28 = "tile.splat"(%arg9) : (i32) -> tensor<32xi32, "slice(1,128,blocked(8))">
      %29 = arith.addi %28, %6 : tensor<32xi32, "slice(1,128,blocked(8))">
      %30 = "tile.expand_dims"(%29) {axis = 1 : i32} : (tensor<32xi32, "slice(1,128,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,128,blocked(8)))">
      %31 = "tile.broadcast"(%30) : (tensor<32x1xi32, "expand(1,slice(1,128,blocked(8)))">) -> tensor<32x128xi32, "blocked(8)">
      %32 = "tile.splat"(%arg3) : (i32) -> tensor<32x128xi32, "blocked(8)">
      %33 = arith.muli %31, %32 : tensor<32x128xi32, "blocked(8)">
      %34 = "tile.expand_dims"(%3) {axis = 0 : i32} : (tensor<128xi32, "slice(0,32,blocked(8))">) -> tensor<1x128xi32, "expand(0,slice(0,32,blocked(8)))">
      %35 = "tile.broadcast"(%34) : (tensor<1x128xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x128xi32, "blocked(8)">
      %36 = arith.addi %33, %35 : tensor<32x128xi32, "blocked(8)">
      %true_2 = arith.constant true
      %37 = "tile.splat"(%true_2) : (i1) -> tensor<32x128xi1, "blocked(8)">
      %cst_3 = arith.constant 0.000000e+00 : f16
      %38 = "tile.load"(%arg2, %36, %37, %cst_3) : (!llvm.ptr<1>, tensor<32x128xi32, "blocked(8)">, tensor<32x128xi1, "blocked(8)">, f16) -> tensor<32x128xf16, "blocked(8)">
      %39 = "tile.splat"(%arg9) : (i32) -> tensor<32xi32, "slice(1,128,blocked(8,2))">
      %40 = arith.addi %39, %7 : tensor<32xi32, "slice(1,128,blocked(8,2))">
      %41 = "tile.expand_dims"(%40) {axis = 1 : i32} : (tensor<32xi32, "slice(1,128,blocked(8,2))">) -> tensor<32x1xi32, "expand(1,slice(1,128,blocked(8,2)))">
      %42 = "tile.broadcast"(%41) : (tensor<32x1xi32, "expand(1,slice(1,128,blocked(8,2)))">) -> tensor<32x128xi32, "blocked(8,2)">
      %43 = "tile.splat"(%arg5) : (i32) -> tensor<32x128xi32, "blocked(8,2)">
      %44 = arith.muli %42, %43 : tensor<32x128xi32, "blocked(8,2)">
      %45 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<128xi32, "slice(0,32,blocked(8,2))">) -> tensor<1x128xi32, "expand(0,slice(0,32,blocked(8,2)))">
      %46 = "tile.broadcast"(%45) : (tensor<1x128xi32, "expand(0,slice(0,32,blocked(8,2)))">) -> tensor<32x128xi32, "blocked(8,2)">
      %47 = arith.addi %44, %46 : tensor<32x128xi32, "blocked(8,2)">
      %true_4 = arith.constant true
      %48 = "tile.splat"(%true_4) : (i1) -> tensor<32x128xi1, "blocked(8,2)">
      %cst_5 = arith.constant 0.000000e+00 : f16
      %49 = "tile.load"(%arg4, %47, %48, %cst_5) : (!llvm.ptr<1>, tensor<32x128xi32, "blocked(8,2)">, tensor<32x128xi1, "blocked(8,2)">, f16) -> tensor<32x128xf16, "blocked(8,2)">
      %cst_6 = arith.constant 0.000000e+00 : f32
      %50 = "tile.splat"(%cst_6) : (f32) -> tensor<64x32xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
      %51 = "tile.convert_layout"(%38) : (tensor<32x128xf16, "blocked(8)">) -> tensor<32x128xf16, "opbt(wmma_gfx12,16,16,16,8,f16,4,1)">
      %52 = "tile.dot"(%18, %51, %50) {trans_b = true} : (tensor<64x128xf16, "opa(wmma_gfx12,16,16,16,8,f16,4,1)">, tensor<32x128xf16, "opbt(wmma_gfx12,16,16,16,8,f16,4,1)">, tensor<64x32xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">) -> tensor<64x32xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
      %53 = arith.truncf %52 : tensor<64x32xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)"> to tensor<64x32xf16, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
      %54 = "tile.convert_layout"(%53) : (tensor<64x32xf16, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">) -> tensor<64x32xf16, "permk(1,1:2:8:4:16,opa(wmma_gfx12,16,16,16,8,f16,4,1))">
      %55 = "tile.convert_layout"(%49) : (tensor<32x128xf16, "blocked(8,2)">) -> tensor<32x128xf16, "permk(0,1:2:8:4:16,opb(wmma_gfx12,16,16,16,8,f16,4,1))">
      %56 = "tile.dot"(%54, %55, %arg10) {trans_b = false} : (tensor<64x32xf16, "permk(1,1:2:8:4:16,opa(wmma_gfx12,16,16,16,8,f16,4,1))">, tensor<32x128xf16, "permk(0,1:2:8:4:16,opb(wmma_gfx12,16,16,16,8,f16,4,1))">, tensor<64x128xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">) -> tensor<64x128xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
      scf.yield %56 : tensor<64x128xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    }
    %20 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<64xi32, "slice(1,128,acct(wmma_gfx12,16,16,16,8,f16,4,1))">) -> tensor<64x1xi32, "expand(1,slice(1,128,acct(wmma_gfx12,16,16,16,8,f16,4,1)))">
    %21 = "tile.broadcast"(%20) : (tensor<64x1xi32, "expand(1,slice(1,128,acct(wmma_gfx12,16,16,16,8,f16,4,1)))">) -> tensor<64x128xi32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    %22 = "tile.splat"(%arg7) : (i32) -> tensor<64x128xi32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    %23 = arith.muli %21, %22 : tensor<64x128xi32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    %24 = "tile.expand_dims"(%5) {axis = 0 : i32} : (tensor<128xi32, "slice(0,64,acct(wmma_gfx12,16,16,16,8,f16,4,1))">) -> tensor<1x128xi32, "expand(0,slice(0,64,acct(wmma_gfx12,16,16,16,8,f16,4,1)))">
    %25 = "tile.broadcast"(%24) : (tensor<1x128xi32, "expand(0,slice(0,64,acct(wmma_gfx12,16,16,16,8,f16,4,1)))">) -> tensor<64x128xi32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    %26 = arith.addi %23, %25 : tensor<64x128xi32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    %true_1 = arith.constant true
    %27 = "tile.splat"(%true_1) : (i1) -> tensor<64x128xi1, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">
    "tile.store"(%arg6, %26, %19, %27) : (!llvm.ptr<1>, tensor<64x128xi32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">, tensor<64x128xf32, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">, tensor<64x128xi1, "acct(wmma_gfx12,16,16,16,8,f16,4,1)">) -> ()
    return
  }
}
