// PASS: stage-lds gfx950
// Q's second staging could read the bytes its first one stored (stage_lds_shared_staging_gfx950),
// but the two 64x64 stagings between them take the whole arena (the largest staging), so they
// cannot leave those bytes alone: the sharing is dropped and the second staging stores its own
// copy.
// CHECK: "tile.local_store"([[Q:%[0-9]+]]) {offset = 0 : i32, row_stride = 72 : i32} : (tensor<32x64xf16
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 72 : i32} : (tensor<64x64xf16
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 72 : i32} : (tensor<64x64xf16
// CHECK: "tile.local_store"([[Q]]) {offset = 0 : i32, row_stride = 72 : i32, transpose_read} : (tensor<32x64xf16
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"() {offset = 0 : i32, row_stride = 72 : i32, transpose_read}
module attributes {tile.arch = "gfx950"} {
  func.func @share2(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>, %arg3: i32, %arg4: !llvm.ptr<1>, %arg5: i32, %arg6: !llvm.ptr<1>, %arg7: i32, %arg8: !llvm.ptr<1>, %arg9: i32, %arg10: !llvm.ptr<1>, %arg11: i32) attributes {tile.kernel, tile.large_args = array<i32>, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,blocked(8))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,32,blocked(8))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,acct(mfma,32,32,16,8,f16,2,2))">
    %4 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,acct(mfma,32,32,16,8,f16,2,2))">
    %5 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,acct(mfma,16,16,32,8,f16,4,1))">
    %6 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,acct(mfma,16,16,32,8,f16,4,1))">
    %7 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(1,64,blocked(8))">
    %8 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %9 = "tile.broadcast"(%8) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %10 = "tile.splat"(%arg1) : (i32) -> tensor<64x64xi32, "blocked(8)">
    %11 = arith.muli %9, %10 : tensor<64x64xi32, "blocked(8)">
    %12 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">
    %13 = "tile.broadcast"(%12) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %14 = arith.addi %11, %13 : tensor<64x64xi32, "blocked(8)">
    %true = arith.constant true
    %15 = "tile.splat"(%true) : (i1) -> tensor<64x64xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %16 = "tile.load"(%arg0, %14, %15, %cst) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(8)">, tensor<64x64xi1, "blocked(8)">, f16) -> tensor<64x64xf16, "blocked(8)">
    %17 = "tile.expand_dims"(%7) {axis = 1 : i32} : (tensor<32xi32, "slice(1,64,blocked(8))">) -> tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %18 = "tile.broadcast"(%17) : (tensor<32x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %19 = "tile.splat"(%arg3) : (i32) -> tensor<32x64xi32, "blocked(8)">
    %20 = arith.muli %18, %19 : tensor<32x64xi32, "blocked(8)">
    %21 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<64xi32, "slice(0,32,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">
    %22 = "tile.broadcast"(%21) : (tensor<1x64xi32, "expand(0,slice(0,32,blocked(8)))">) -> tensor<32x64xi32, "blocked(8)">
    %23 = arith.addi %20, %22 : tensor<32x64xi32, "blocked(8)">
    %true_0 = arith.constant true
    %24 = "tile.splat"(%true_0) : (i1) -> tensor<32x64xi1, "blocked(8)">
    %cst_1 = arith.constant 0.000000e+00 : f16
    %25 = "tile.load"(%arg2, %23, %24, %cst_1) : (!llvm.ptr<1>, tensor<32x64xi32, "blocked(8)">, tensor<32x64xi1, "blocked(8)">, f16) -> tensor<32x64xf16, "blocked(8)">
    %cst_2 = arith.constant 0.000000e+00 : f32
    %26 = "tile.splat"(%cst_2) : (f32) -> tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %27 = "tile.convert_layout"(%16) : (tensor<64x64xf16, "blocked(8)">) -> tensor<64x64xf16, "opa(mfma,16,16,32,8,f16,4,1)">
    %28 = "tile.convert_layout"(%25) : (tensor<32x64xf16, "blocked(8)">) -> tensor<32x64xf16, "opbt(mfma,16,16,32,8,f16,4,1)">
    %29 = "tile.dot"(%27, %28, %26) {trans_b = true} : (tensor<64x64xf16, "opa(mfma,16,16,32,8,f16,4,1)">, tensor<32x64xf16, "opbt(mfma,16,16,32,8,f16,4,1)">, tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)">) -> tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %30 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %31 = "tile.broadcast"(%30) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %32 = "tile.splat"(%arg5) : (i32) -> tensor<64x64xi32, "blocked(8)">
    %33 = arith.muli %31, %32 : tensor<64x64xi32, "blocked(8)">
    %34 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">
    %35 = "tile.broadcast"(%34) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %36 = arith.addi %33, %35 : tensor<64x64xi32, "blocked(8)">
    %true_3 = arith.constant true
    %37 = "tile.splat"(%true_3) : (i1) -> tensor<64x64xi1, "blocked(8)">
    %cst_4 = arith.constant 0.000000e+00 : f16
    %38 = "tile.load"(%arg4, %36, %37, %cst_4) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(8)">, tensor<64x64xi1, "blocked(8)">, f16) -> tensor<64x64xf16, "blocked(8)">
    %39 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">
    %40 = "tile.broadcast"(%39) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %41 = "tile.splat"(%arg7) : (i32) -> tensor<64x64xi32, "blocked(8)">
    %42 = arith.muli %40, %41 : tensor<64x64xi32, "blocked(8)">
    %43 = "tile.expand_dims"(%1) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(8))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">
    %44 = "tile.broadcast"(%43) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x64xi32, "blocked(8)">
    %45 = arith.addi %42, %44 : tensor<64x64xi32, "blocked(8)">
    %true_5 = arith.constant true
    %46 = "tile.splat"(%true_5) : (i1) -> tensor<64x64xi1, "blocked(8)">
    %cst_6 = arith.constant 0.000000e+00 : f16
    %47 = "tile.load"(%arg6, %45, %46, %cst_6) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(8)">, tensor<64x64xi1, "blocked(8)">, f16) -> tensor<64x64xf16, "blocked(8)">
    %48 = "tile.expand_dims"(%3) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,acct(mfma,32,32,16,8,f16,2,2))">) -> tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,16,8,f16,2,2)))">
    %49 = "tile.broadcast"(%48) : (tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,32,32,16,8,f16,2,2)))">) -> tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %50 = "tile.splat"(%arg11) : (i32) -> tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %51 = arith.muli %49, %50 : tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %52 = "tile.expand_dims"(%4) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,acct(mfma,32,32,16,8,f16,2,2))">) -> tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,32,32,16,8,f16,2,2)))">
    %53 = "tile.broadcast"(%52) : (tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,32,32,16,8,f16,2,2)))">) -> tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %54 = arith.addi %51, %53 : tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">
    %cst_7 = arith.constant 0.000000e+00 : f32
    %55 = "tile.splat"(%cst_7) : (f32) -> tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">
    %56 = "tile.convert_layout"(%38) : (tensor<64x64xf16, "blocked(8)">) -> tensor<64x64xf16, "opa(mfma,32,32,16,8,f16,2,2)">
    %57 = "tile.convert_layout"(%47) : (tensor<64x64xf16, "blocked(8)">) -> tensor<64x64xf16, "opbt(mfma,32,32,16,8,f16,2,2)">
    %58 = "tile.dot"(%56, %57, %55) {trans_b = true} : (tensor<64x64xf16, "opa(mfma,32,32,16,8,f16,2,2)">, tensor<64x64xf16, "opbt(mfma,32,32,16,8,f16,2,2)">, tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">) -> tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">
    %true_8 = arith.constant true
    %59 = "tile.splat"(%true_8) : (i1) -> tensor<64x64xi1, "acct(mfma,32,32,16,8,f16,2,2)">
    "tile.store"(%arg10, %54, %58, %59) : (!llvm.ptr<1>, tensor<64x64xi32, "acct(mfma,32,32,16,8,f16,2,2)">, tensor<64x64xf32, "acct(mfma,32,32,16,8,f16,2,2)">, tensor<64x64xi1, "acct(mfma,32,32,16,8,f16,2,2)">) -> ()
    %60 = "tile.expand_dims"(%5) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,acct(mfma,16,16,32,8,f16,4,1))">) -> tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,16,16,32,8,f16,4,1)))">
    %61 = "tile.broadcast"(%60) : (tensor<64x1xi32, "expand(1,slice(1,64,acct(mfma,16,16,32,8,f16,4,1)))">) -> tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %62 = "tile.splat"(%arg9) : (i32) -> tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %63 = arith.muli %61, %62 : tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %64 = "tile.expand_dims"(%6) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,acct(mfma,16,16,32,8,f16,4,1))">) -> tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,16,16,32,8,f16,4,1)))">
    %65 = "tile.broadcast"(%64) : (tensor<1x64xi32, "expand(0,slice(0,64,acct(mfma,16,16,32,8,f16,4,1)))">) -> tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %66 = arith.addi %63, %65 : tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">
    %cst_9 = arith.constant 0.000000e+00 : f32
    %67 = "tile.splat"(%cst_9) : (f32) -> tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %68 = arith.truncf %29 : tensor<64x32xf32, "acct(mfma,16,16,32,8,f16,4,1)"> to tensor<64x32xf16, "acct(mfma,16,16,32,8,f16,4,1)">
    %69 = "tile.convert_layout"(%68) : (tensor<64x32xf16, "acct(mfma,16,16,32,8,f16,4,1)">) -> tensor<64x32xf16, "permk(1,1:2:16:4:8,opa(mfma,16,16,32,8,f16,4,1))">
    %70 = "tile.convert_layout"(%25) : (tensor<32x64xf16, "blocked(8)">) -> tensor<32x64xf16, "permk(0,1:2:16:4:8,opb(mfma,16,16,32,8,f16,4,1))">
    %71 = "tile.dot"(%69, %70, %67) {trans_b = false} : (tensor<64x32xf16, "permk(1,1:2:16:4:8,opa(mfma,16,16,32,8,f16,4,1))">, tensor<32x64xf16, "permk(0,1:2:16:4:8,opb(mfma,16,16,32,8,f16,4,1))">, tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">) -> tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">
    %true_10 = arith.constant true
    %72 = "tile.splat"(%true_10) : (i1) -> tensor<64x64xi1, "acct(mfma,16,16,32,8,f16,4,1)">
    "tile.store"(%arg8, %66, %71, %72) : (!llvm.ptr<1>, tensor<64x64xi32, "acct(mfma,16,16,32,8,f16,4,1)">, tensor<64x64xf32, "acct(mfma,16,16,32,8,f16,4,1)">, tensor<64x64xi1, "acct(mfma,16,16,32,8,f16,4,1)">) -> ()
    return
  }
}
