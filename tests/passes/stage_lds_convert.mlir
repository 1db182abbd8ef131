// PASS: stage-lds gfx942
// A conversion that moves elements between lanes goes through LDS: store, barrier, load; rows of
// the 64x32 f16 tile are padded to 36 elements; the arena size is recorded on the module. The
// first store needs no barrier before it (nothing was read yet); the second overwrites the bytes
// the first one's loads read, so a barrier comes first.
// CHECK: module attributes {tile.lds_arena = 0 : i32, tile.lds_bytes = 4608 : i32}
// CHECK-NOT: "tile.barrier"
// CHECK: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 36 : i32}
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"(){{.*}} -> tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_store"(%{{.*}}) {offset = 0 : i32, row_stride = 36 : i32}
// CHECK-NEXT: "tile.barrier"
// CHECK-NEXT: "tile.local_load"(){{.*}} -> tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">
// CHECK-NOT: "tile.convert_layout"
module {
  func.func @dot(%arg0: !llvm.ptr<1>, %arg1: !llvm.ptr<1>, %arg2: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %0 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,32,blocked(8))">
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,acc(mfma,32,32,8,4,f16,2,2))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,acc(mfma,32,32,8,4,f16,2,2))">
    %3 = "tile.arange"() {start = 0 : i32} : () -> tensor<32xi32, "slice(0,64,blocked(8))">
    %4 = "tile.expand_dims"(%0) {axis = 1 : i32} : (tensor<64xi32, "slice(1,32,blocked(8))">) -> tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">
    %5 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,acc(mfma,32,32,8,4,f16,2,2))">) -> tensor<64x1xi32, "expand(1,slice(1,64,acc(mfma,32,32,8,4,f16,2,2)))">
    %6 = "tile.expand_dims"(%3) {axis = 0 : i32} : (tensor<32xi32, "slice(0,64,blocked(8))">) -> tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">
    %7 = "tile.broadcast"(%4) : (tensor<64x1xi32, "expand(1,slice(1,32,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %8 = "tile.broadcast"(%6) : (tensor<1x32xi32, "expand(0,slice(0,64,blocked(8)))">) -> tensor<64x32xi32, "blocked(8)">
    %c32_i32 = arith.constant 32 : i32
    %9 = "tile.splat"(%c32_i32) : (i32) -> tensor<64x32xi32, "blocked(8)">
    %10 = arith.muli %7, %9 : tensor<64x32xi32, "blocked(8)">
    %11 = arith.addi %10, %8 : tensor<64x32xi32, "blocked(8)">
    %true = arith.constant true
    %12 = "tile.splat"(%true) : (i1) -> tensor<64x32xi1, "blocked(8)">
    %cst = arith.constant 0.000000e+00 : f16
    %13 = "tile.load"(%arg0, %11, %12, %cst) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
    %14 = "tile.load"(%arg1, %11, %12, %cst) : (!llvm.ptr<1>, tensor<64x32xi32, "blocked(8)">, tensor<64x32xi1, "blocked(8)">, f16) -> tensor<64x32xf16, "blocked(8)">
    %cst_0 = arith.constant 0.000000e+00 : f32
    %15 = "tile.splat"(%cst_0) : (f32) -> tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">
    %16 = "tile.convert_layout"(%13) : (tensor<64x32xf16, "blocked(8)">) -> tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">
    %17 = "tile.convert_layout"(%14) : (tensor<64x32xf16, "blocked(8)">) -> tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">
    %18 = "tile.dot"(%16, %17, %15) {trans_b = true} : (tensor<64x32xf16, "opa(mfma,32,32,8,4,f16,2,2)">, tensor<64x32xf16, "opbt(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">) -> tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">
    %19 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,acc(mfma,32,32,8,4,f16,2,2))">) -> tensor<1x64xi32, "expand(0,slice(0,64,acc(mfma,32,32,8,4,f16,2,2)))">
    %20 = "tile.broadcast"(%5) : (tensor<64x1xi32, "expand(1,slice(1,64,acc(mfma,32,32,8,4,f16,2,2)))">) -> tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %21 = "tile.broadcast"(%19) : (tensor<1x64xi32, "expand(0,slice(0,64,acc(mfma,32,32,8,4,f16,2,2)))">) -> tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %c64_i32 = arith.constant 64 : i32
    %22 = "tile.splat"(%c64_i32) : (i32) -> tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %23 = arith.muli %20, %22 : tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %24 = arith.addi %23, %21 : tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">
    %25 = "tile.splat"(%true) : (i1) -> tensor<64x64xi1, "acc(mfma,32,32,8,4,f16,2,2)">
    "tile.store"(%arg2, %24, %18, %25) : (!llvm.ptr<1>, tensor<64x64xi32, "acc(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xf32, "acc(mfma,32,32,8,4,f16,2,2)">, tensor<64x64xi1, "acc(mfma,32,32,8,4,f16,2,2)">) -> ()
    return
  }
}
