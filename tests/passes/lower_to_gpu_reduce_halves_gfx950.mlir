// PASS: lower-to-gpu gfx950
// The column sum of lower_to_gpu_reduce_across_waves_gfx90a.mlir on gfx950: xor 8 and 16 are
// shuffles, but the halves of the wave64 (xor 32) combine through one v_permlane32_swap of each
// value with itself and one add of the two results (no shuffle by 32, whose lowering took two
// moves, a compare and a select more).
// CHECK: gpu.func @col_sum({{.*}}) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK-COUNT-8: gpu.shuffle  xor %{{.*}}, %c8_i32{{[_0-9]*}}, %c64_i32{{[_0-9]*}} : f32
// CHECK-COUNT-8: gpu.shuffle  xor %{{.*}}, %c16_i32{{[_0-9]*}}, %c64_i32{{[_0-9]*}} : f32
// CHECK-NOT: gpu.shuffle
// CHECK: %[[X:.*]] = llvm.bitcast %{{.*}} : f32 to i32
// CHECK-NEXT: %[[P:.*]] = rocdl.permlane32.swap %[[X]], %[[X]], false, false : (i32, i32) -> <(i32, i32)>
// CHECK-NEXT: %[[LO:.*]] = llvm.extractvalue %[[P]][0]
// CHECK-NEXT: %[[HI:.*]] = llvm.extractvalue %[[P]][1]
// CHECK-NEXT: %[[A:.*]] = llvm.bitcast %[[LO]] : i32 to f32
// CHECK-NEXT: %[[B:.*]] = llvm.bitcast %[[HI]] : i32 to f32
// CHECK-NEXT: arith.addf %[[A]], %[[B]] : f32
// CHECK-COUNT-7: rocdl.permlane32.swap
// CHECK-NOT: rocdl.permlane32.swap
// CHECK-NOT: gpu.shuffle
// CHECK: rocdl.s.barrier
module attributes {tile.arch = "gfx950", tile.lds_arena = 0 : i32, tile.lds_bytes = 8192 : i32} {
  func.func @col_sum(%arg0: !llvm.ptr<1>, %arg1: i32, %arg2: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %c8_i32 = arith.constant 8 : i32
    %0 = arith.muli %arg1, %c8_i32 : i32
    %1 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(1,64,blocked(4))">
    %2 = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32, "slice(0,64,blocked(4))">
    %3 = "tile.expand_dims"(%1) {axis = 1 : i32} : (tensor<64xi32, "slice(1,64,blocked(4))">) -> tensor<64x1xi32, "expand(1,slice(1,64,blocked(4)))">
    %4 = "tile.broadcast"(%3) : (tensor<64x1xi32, "expand(1,slice(1,64,blocked(4)))">) -> tensor<64x64xi32, "blocked(4)">
    %5 = "tile.splat"(%0) : (i32) -> tensor<64x64xi32, "blocked(4)">
    %6 = arith.muli %4, %5 : tensor<64x64xi32, "blocked(4)">
    %7 = "tile.expand_dims"(%2) {axis = 0 : i32} : (tensor<64xi32, "slice(0,64,blocked(4))">) -> tensor<1x64xi32, "expand(0,slice(0,64,blocked(4)))">
    %8 = "tile.broadcast"(%7) : (tensor<1x64xi32, "expand(0,slice(0,64,blocked(4)))">) -> tensor<64x64xi32, "blocked(4)">
    %9 = arith.addi %6, %8 : tensor<64x64xi32, "blocked(4)">
    %true = arith.constant true
    %10 = "tile.splat"(%true) : (i1) -> tensor<64x64xi1, "blocked(4)">
    %cst = arith.constant 0.000000e+00 : f32
    %11 = "tile.load"(%arg0, %9, %10, %cst) : (!llvm.ptr<1>, tensor<64x64xi32, "blocked(4)">, tensor<64x64xi1, "blocked(4)">, f32) -> tensor<64x64xf32, "blocked(4)">
    %12 = "tile.reduce"(%11) {axis = 0 : i32, kind = "sum"} : (tensor<64x64xf32, "blocked(4)">) -> tensor<64xf32, "slice(0,64,blocked(4))">
    %true_0 = arith.constant true
    %13 = "tile.splat"(%true_0) : (i1) -> tensor<64xi1, "slice(0,64,blocked(4))">
    "tile.store"(%arg2, %2, %12, %13) : (!llvm.ptr<1>, tensor<64xi32, "slice(0,64,blocked(4))">, tensor<64xf32, "slice(0,64,blocked(4))">, tensor<64xi1, "slice(0,64,blocked(4))">) -> ()
    return
  }
}
