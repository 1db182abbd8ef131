// PASS: stage-lds gfx942
// Stagings that follow one another in disjoint bytes of the arena need no barrier before their
// stores: the one between (after the previous staging's store) already waited for every read of
// the bytes. The arena is the 128x64 A operand's 17408 bytes, staged first at offset 0; the loop's
// two 64x32 stagings (4608 bytes each) go after the 64x64 B operand's [0, 8704) bytes and wrap to
// 0, and neither overlaps what was read since the last barrier, in the loop's first iteration or
// the next ones: one barrier per staging in the loop instead of two. (From two.tile: a dot before
// a loop of dots.)
// CHECK: tile.lds_bytes = 17408
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 68 : i32} : (tensor<128x64xf16
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 68 : i32} : (tensor<64x64xf16
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK: scf.for
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 4352 : i32, row_stride = 36 : i32}
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 36 : i32}
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"
// CHECK-NOT: "tile.barrier"
// CHECK: scf.yield
module attributes {tile.arch = "gfx942"} {
  func.func @two(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: i32, %arg6: i32, %arg7: i32, %arg8: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(1,64,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32, "slice(1,64,acct(mfma,32,32,8,4,f16,4,1))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,128,blocked(8))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,blocked(8))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,blocked(8))">
    %5 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,blocked(8))">
    %6 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,128,acct(mfma,32,32,8,4,f16,4,1))">
    %7 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,acct(mfma,32,32,8,4,f16,2,2))">
    %8 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<128xi32, "slice(1,64,blocked(8))">) -> tensor<128x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %9 = "tile.broadcast"(%8) : (tensor<128x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<128x64xi32, "blocked(8)">
    %10 = "tile.splat"(%arg1) : (i32) -> tensor<128x64xi32, "blocked(8)">
    %11 = arith.muli %9, %10 : tensor<128x64xi32, "blocked(8)">
    %12 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<64xi32, "slice(0,128,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,128,blocked(8)))">
    %13 = "tile.broadcast"(%12) : (tensor<1x64xi32, "expand(0,slice(0,128,blocked(8)))">) -> tensor<128x64xi32, "blocked(8)">
    %14 = arith.addi %11, %13 : tensor<128x64xi32, "blocked(8)">
    %true = arith.constant true
    %15 = "tile.splat"(%true) : (i1) -> tensor<128x64xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %16 = "tile.load"(%arg0, %14, %15, %cst) : (!llvm.ptr<1>, tensor<128x64xi32, "blocked(8)">, tensor<128x64xi1, "blocked(8)">, f16) -> tensor<128x64xf16, "blocked(8)">
    %17 = "tile.expand_dims"(%4) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %18 = "tile.broadcast"(%17) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %19 = "tile.splat"(%arg3) : (i32) -> tensor<64x64xi32, "blocked(8)">
    %20 = arith.muli %18, %19 : tensor<64x64xi32, "blocked(8)">
    %21 = "tile.expand_dims"(%3) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">
    %22 = "tile.broadcast"(%21) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %23 = arith.addi %20, %22 : tensor<64x64xi32, "blocked(8)">
    %true_0 = arith.constant true
    %24 = "tile.splat"(%true_0) : (i1) -> tensor<64x64xi1, "blocked(8)">
    %cst_1 = arith.constant 0.000000e+00 : f16
    %25 = "tile.load"(%arg2, %23, %24, %cst_1) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(8)">, tensor<64x64xi1, "blocked(8)">, f16) -> tensor<64x64xf16, "blocked(8)">
    %cst_2 = arith.constant 0.000000e+00 : f32
    %26 = "tile.splat"(%cst_2) : (f32) -> tensor<128x64xf32, "acct(mfma,32,32,8,4,f16,4,1)">
    %27 = "tile.convert_layout"(%16) : (tensor<128x64xf16, "blocked(8)">) -> tensor<128x64xf16, "opa(mfma,32,32,8,4,f16,4,1)">
    %28 = "tile.convert_layout"(%25) : (tensor<64x64xf16, "blocked(8)">) -> tensor<64x64xf16, "opbt(mfma,32,32,8,4,f16,4,1)">
    %29 = "tile.dot"(%27, %28, %26) {trans_b = true} : (tensor<128x64xf16, "opa(mfma,32,32,8,4,f16,4,1)">, tensor<64x64xf16, "opbt(mfma,32,32,8,4,f16,4,1)">, tensor<128x64xf32, "acct(mfma,32,32,8,4,f16,4,1)">) -> tensor<128x64xf32, "acct(mfma,32,32,8,4,f16,4,1)">
    %30 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,blocked(8))">
    %31 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,acct(mfma,32,32,8,4,f16,2,2))">
    %32 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,blocked(8))">
    %cst_3 = arith.constant 0.000000e+00 : f32
    %33 = "tile.splat"(%cst_3) : (f32) -> tensor<64x64xf32, "acct(mfma,32,32,8,4,f16,2,2)">
    %c0_i32 = arith.constant 0 : i32
    %c32_i32 = arith.constant 32 : i32
    %34 = scf.for %arg9 = %c0_i32 to %arg7 step %c32_i32 iter_args(%arg10 = %33) -> (tensor<64x64xf32, "acct(mfma,32,32,8,4,f16,2,2)">)  : i32 {
      %51 = "tile.expand_dims"(%30) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">
      %52 = "tile.broadcast"(%51) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
      %53 = "tile.splat"(%arg1) : (i32) -> tensor<64x32xi32, "blocked(8)">
      %54 = arith.muli %52, %53 : tensor<64x32xi32, "blocked(8)">
      %55 = "tile.splat"(%arg9) : (i32) -> tensor<32xi32, "slice(0,64,blocked(8))">
      %56 = arith.addi %55, %32 : tensor<32xi32, "slice(0,64,blocked(8))">
      %57 = "tile.expand_dims"(%56) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">
      %58 = "tile.broadcast"(%57) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
      %59 = arith.addi %54, %58 : tensor<64x32xi32, "blocked(8)">
      %true_6 = arith.constant true
      %60 = "tile.splat"(%true_6) : (i1) -> tensor<64x32xi1, "blocked(8)">
      %cst_7 = arith.constant 0.000000e+00 : f16
      %61 = "tile.load"(%arg0, %59, %60, %cst_7) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
      %62 = "tile.expand_dims"(%5) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">
      %63 = "tile.broadcast"(%62) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
      %64 = "tile.splat"(%arg3) : (i32) -> tensor<64x32xi32, "blocked(8)">
      %65 = arith.muli %63, %64 : tensor<64x32xi32, "blocked(8)">
      %66 = "tile.splat"(%arg9) : (i32) -> tensor<32xi32, "slice(0,64,blocked(8))">
      %67 = arith.addi %66, %32 : tensor<32xi32, "slice(0,64,blocked(8))">
      %68 = "tile.expand_dims"(%67) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">
      %69 = "tile.broadcast"(%68) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
      %70 = arith.addi %65, %69 : tensor<64x32xi32, "blocked(8)">
      %true_8 = arith.constant true
      %71 = "tile.splat"(%true_8) : (i1) -> tensor<64x32xi1, "blocked(8)">
      %cst_9 = arith.constant 0.000000e+00 : f16
      %72 = "tile.load"(%arg2, %70, %71, %cst_9) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
      %73 = "tile.convert_layout"(%61) : (tensor<64x32xf16, "blocked(8)">) -> tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">
      %74 = "tile.convert_layout"(%72) : (tensor<64x32xf16, "blocked(8)">) -> tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">
      %75 = "tile.dot"(%73, %74, %arg10) {trans_b = true} : (tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">, tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xf32, "acct(mfma,32,32,8,4,f16,2,2)">) -> tensor<64x64xf32, "acct(mfma,32,32,8,4,f16,2,2)">
      scf.yield %75 : tensor<64x64xf32, "acct(mfma,32,32,8,4,f16,2,2)">
    }
    %35 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<128xi32, "slice(1,64,acct(mfma,32,32,8,4,f16,4,1))">) -> tensor<128x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,8,4,f16,4,1)))">
    %36 = "tile.broadcast"(%35) : (tensor<128x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,8,4,f16,4,1)))">) -> tensor<128x64xi32, "acct(mfma,32,32,8,4,f16,4,1)">
    %37 = "tile.splat"(%arg5) : (i32) -> tensor<128x64xi32, "acct(mfma,32,32,8,4,f16,4,1)">
    %38 = arith.muli %36, %37 : tensor<128x64xi32, "acct(mfma,32,32,8,4,f16,4,1)">
    %39 = "tile.expand_dims"(%6) {axis = 0 : i32} : (tensor<64xi32, "slice(0,128,acct(mfma,32,32,8,4,f16,4,1))">) -> tensor<1x64xi32, "expand(0,slice(0,128,acct(mfma,32,32,8,4,f16,4,1)))">
    %40 = "tile.broadcast"(%39) : (tensor<1x64xi32, "expand(0,slice(0,128,acct(mfma,32,32,8,4,f16,4,1)))">) -> tensor<128x64xi32, "acct(mfma,32,32,8,4,f16,4,1)">
    %41 = arith.addi %38, %40 : tensor<128x64xi32, "acct(mfma,32,32,8,4,f16,4,1)">
    %true_4 = arith.constant true
    %42 = "tile.splat"(%true_4) : (i1) -> tensor<128x64xi1, "acct(mfma,32,32,8,4,f16,4,1)">
    "tile.store"(%arg4, %41, %29, %42) : (!llvm.ptr<1>, tensor<128x64xi32, "acct(mfma,32,32,8,4,f16,4,1)">, tensor<128x64xf32, "acct(mfma,32,32,8,4,f16,4,1)">, tensor<128x64xi1, "acct(mfma,32,32,8,4,f16,4,1)">) -> ()
    %43 = "tile.expand_dims"(%31) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,acct(mfma,32,32,8,4,f16,2,2))">) -> tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,8,4,f16,2,2)))">
    %44 = "tile.broadcast"(%43) : (tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,8,4,f16,2,2)))">) -> tensor<64x64xi32, "acct(mfma,32,32,8,4,f16,2,2)">
    %45 = "tile.splat"(%arg5) : (i32) -> tensor<64x64xi32, "acct(mfma,32,32,8,4,f16,2,2)">
    %46 = arith.muli %44, %45 : tensor<64x64xi32, "acct(mfma,32,32,8,4,f16,2,2)">
    %47 = "tile.expand_dims"(%7) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,acct(mfma,32,32,8,4,f16,2,2))">) -> tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,32,32,8,4,f16,2,2)))">
    %48 = "tile.broadcast"(%47) : (tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,32,32,8,4,f16,2,2)))">) -> tensor<64x64xi32, "acct(mfma,32,32,8,4,f16,2,2)">
    %49 = arith.addi %46, %48 : tensor<64x64xi32, "acct(mfma,32,32,8,4,f16,2,2)">
    %true_5 = arith.constant true
    %50 = "tile.splat"(%true_5) : (i1) -> tensor<64x64xi1, "acct(mfma,32,32,8,4,f16,2,2)">
    "tile.store"(%arg4, %49, %34, %50) : (!llvm.ptr<1>, tensor<64x64xi32, "acct(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xf32, "acct(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xi1, "acct(mfma,32,32,8,4,f16,2,2)">) -> ()
    return
  }
}
