// PASS: assign-layouts gfx942
// A B operand [K, N] loaded row by row is staged through LDS transposed; its load takes the rows
// per lane (up to CompileOptions.transposed_rows) whose transposed stores move the most bytes per
// LDS cycle, ties to more rows. K 64, N 128 (attention's V at hdim 128): with 4 rows per lane a
// store's 16 lanes are 8 LDS rows apart, in banks 0 and 16 of 32 (8-way conflicts); with 2 rows,
// 4-byte stores of 32 lanes, 4-way. K 128, N 64: both move 32 bytes per cycle, 4 rows win.
// CHECK-LABEL: func.func @k64n128
// CHECK: "tile.load"{{.*}} -> tensor<64x128xf16, "blocked(8,2)">
// CHECK-LABEL: func.func @k128n64
// CHECK: "tile.load"{{.*}} -> tensor<128x64xf16, "blocked(8,4)">
module {
  func.func @k64n128(%a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %c: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %m = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %k = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %n = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32>
    %m2 = "tile.expand_dims"(%m) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32>
    %kc = "tile.expand_dims"(%k) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
    %kr = "tile.expand_dims"(%k) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32>
    %n2 = "tile.expand_dims"(%n) {axis = 0 : i32} : (tensor<128xi32>) -> tensor<1x128xi32>
    %ck = arith.constant 64 : i32
    %ma = "tile.broadcast"(%m2) : (tensor<64x1xi32>) -> tensor<64x64xi32>
    %ka = "tile.broadcast"(%kc) : (tensor<1x64xi32>) -> tensor<64x64xi32>
    %sa = "tile.splat"(%ck) : (i32) -> tensor<64x64xi32>
    %mas = arith.muli %ma, %sa : tensor<64x64xi32>
    %offa = arith.addi %mas, %ka : tensor<64x64xi32>
    %true = arith.constant true
    %mka = "tile.splat"(%true) : (i1) -> tensor<64x64xi1>
    %z = arith.constant 0.0 : f16
    %ta = "tile.load"(%a, %offa, %mka, %z) : (!llvm.ptr<1>, tensor<64x64xi32>, tensor<64x64xi1>, f16) -> tensor<64x64xf16>
    %kb = "tile.broadcast"(%kr) : (tensor<64x1xi32>) -> tensor<64x128xi32>
    %nb = "tile.broadcast"(%n2) : (tensor<1x128xi32>) -> tensor<64x128xi32>
    %cn = arith.constant 128 : i32
    %sb = "tile.splat"(%cn) : (i32) -> tensor<64x128xi32>
    %ks = arith.muli %kb, %sb : tensor<64x128xi32>
    %offb = arith.addi %ks, %nb : tensor<64x128xi32>
    %mkb = "tile.splat"(%true) : (i1) -> tensor<64x128xi1>
    %tb = "tile.load"(%b, %offb, %mkb, %z) : (!llvm.ptr<1>, tensor<64x128xi32>, tensor<64x128xi1>, f16) -> tensor<64x128xf16>
    %zf = arith.constant 0.0 : f32
    %acc = "tile.splat"(%zf) : (f32) -> tensor<64x128xf32>
    %d = "tile.dot"(%ta, %tb, %acc) : (tensor<64x64xf16>, tensor<64x128xf16>, tensor<64x128xf32>) -> tensor<64x128xf32>
    %mc = "tile.broadcast"(%m2) : (tensor<64x1xi32>) -> tensor<64x128xi32>
    %nc = "tile.broadcast"(%n2) : (tensor<1x128xi32>) -> tensor<64x128xi32>
    %sc = "tile.splat"(%cn) : (i32) -> tensor<64x128xi32>
    %mcs = arith.muli %mc, %sc : tensor<64x128xi32>
    %offc = arith.addi %mcs, %nc : tensor<64x128xi32>
    %mkc = "tile.splat"(%true) : (i1) -> tensor<64x128xi1>
    "tile.store"(%c, %offc, %d, %mkc) : (!llvm.ptr<1>, tensor<64x128xi32>, tensor<64x128xf32>, tensor<64x128xi1>) -> ()
    return
  }
  func.func @k128n64(%a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %c: !llvm.ptr<1>) attributes {tile.kernel, tile.waves = 4 : i32} {
    %m = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %k = "tile.arange"() {start = 0 : i32} : () -> tensor<128xi32>
    %n = "tile.arange"() {start = 0 : i32} : () -> tensor<64xi32>
    %m2 = "tile.expand_dims"(%m) {axis = 1 : i32} : (tensor<64xi32>) -> tensor<64x1xi32>
    %kc = "tile.expand_dims"(%k) {axis = 0 : i32} : (tensor<128xi32>) -> tensor<1x128xi32>
    %kr = "tile.expand_dims"(%k) {axis = 1 : i32} : (tensor<128xi32>) -> tensor<128x1xi32>
    %n2 = "tile.expand_dims"(%n) {axis = 0 : i32} : (tensor<64xi32>) -> tensor<1x64xi32>
    %ck = arith.constant 128 : i32
    %ma = "tile.broadcast"(%m2) : (tensor<64x1xi32>) -> tensor<64x128xi32>
    %ka = "tile.broadcast"(%kc) : (tensor<1x128xi32>) -> tensor<64x128xi32>
    %sa = "tile.splat"(%ck) : (i32) -> tensor<64x128xi32>
    %mas = arith.muli %ma, %sa : tensor<64x128xi32>
    %offa = arith.addi %mas, %ka : tensor<64x128xi32>
    %true = arith.constant true
    %mka = "tile.splat"(%true) : (i1) -> tensor<64x128xi1>
    %z = arith.constant 0.0 : f16
    %ta = "tile.load"(%a, %offa, %mka, %z) : (!llvm.ptr<1>, tensor<64x128xi32>, tensor<64x128xi1>, f16) -> tensor<64x128xf16>
    %kb = "tile.broadcast"(%kr) : (tensor<128x1xi32>) -> tensor<128x64xi32>
    %nb = "tile.broadcast"(%n2) : (tensor<1x64xi32>) -> tensor<128x64xi32>
    %cn = arith.constant 64 : i32
    %sb = "tile.splat"(%cn) : (i32) -> tensor<128x64xi32>
    %ks = arith.muli %kb, %sb : tensor<128x64xi32>
    %offb = arith.addi %ks, %nb : tensor<128x64xi32>
    %mkb = "tile.splat"(%true) : (i1) -> tensor<128x64xi1>
    %tb = "tile.load"(%b, %offb, %mkb, %z) : (!llvm.ptr<1>, tensor<128x64xi32>, tensor<128x64xi1>, f16) -> tensor<128x64xf16>
    %zf = arith.constant 0.0 : f32
    %acc = "tile.splat"(%zf) : (f32) -> tensor<64x64xf32>
    %d = "tile.dot"(%ta, %tb, %acc) : (tensor<64x128xf16>, tensor<128x64xf16>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %mc = "tile.broadcast"(%m2) : (tensor<64x1xi32>) -> tensor<64x64xi32>
    %nc = "tile.broadcast"(%n2) : (tensor<1x64xi32>) -> tensor<64x64xi32>
    %sc = "tile.splat"(%cn) : (i32) -> tensor<64x64xi32>
    %mcs = arith.muli %mc, %sc : tensor<64x64xi32>
    %offc = arith.addi %mcs, %nc : tensor<64x64xi32>
    %mkc = "tile.splat"(%true) : (i1) -> tensor<64x64xi1>
    "tile.store"(%c, %offc, %d, %mkc) : (!llvm.ptr<1>, tensor<64x64xi32>, tensor<64x64xf32>, tensor<64x64xi1>) -> ()
    return
  }
}
