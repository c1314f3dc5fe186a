//go:build amd64 && !purego

#include "textflag.h"

// func packAVX(dst *uint8, src *float32, n int)
TEXT ·packAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LEAQ ·packTable(SB), R8
	VXORPS Y0, Y0, Y0
	CMPQ CX, $4
	JB   tail

loop4:
	// 32 floats -> 4 bytes
	VMOVUPS   (SI), Y1
	VMOVUPS   32(SI), Y2
	VMOVUPS   64(SI), Y3
	VMOVUPS   96(SI), Y4
	VCMPPS    $1, Y0, Y1, Y1 // Y1 = Y1 < 0 (LT_OS)
	VCMPPS    $1, Y0, Y2, Y2
	VCMPPS    $1, Y0, Y3, Y3
	VCMPPS    $1, Y0, Y4, Y4
	VMOVMSKPS Y1, AX
	VMOVMSKPS Y2, BX
	VMOVMSKPS Y3, DX
	VMOVMSKPS Y4, R9
	MOVBLZX   (R8)(AX*1), AX
	MOVBLZX   (R8)(BX*1), BX
	MOVBLZX   (R8)(DX*1), DX
	MOVBLZX   (R8)(R9*1), R9
	MOVB      AX, (DI)
	MOVB      BX, 1(DI)
	MOVB      DX, 2(DI)
	MOVB      R9, 3(DI)
	ADDQ      $128, SI
	ADDQ      $4, DI
	SUBQ      $4, CX
	CMPQ      CX, $4
	JAE       loop4

tail:
	TESTQ     CX, CX
	JZ        done
	VMOVUPS   (SI), Y1
	VCMPPS    $1, Y0, Y1, Y1
	VMOVMSKPS Y1, AX
	MOVBLZX   (R8)(AX*1), AX
	MOVB      AX, (DI)
	ADDQ      $32, SI
	INCQ      DI
	DECQ      CX
	JMP       tail

done:
	VZEROUPPER
	RET
