#include "textflag.h"

// func stepped(x int) int
TEXT ·stepped(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ x+0(FP), AX
	INCQ AX
	MOVQ AX, ret+8(FP)
	RET

// func emulated(x int) int
TEXT ·emulated(SB), NOSPLIT|NOFRAME, $0-16
	JLS  next
next:
	MOVQ x+0(FP), AX
	INCQ AX
	MOVQ AX, ret+8(FP)
	RET

// func addrs() (stepped, emulated unsafe.Pointer)
TEXT ·addrs(SB), NOSPLIT, $0-16
	LEAQ ·stepped(SB), AX
	MOVQ AX, stepped+0(FP)
	LEAQ ·emulated(SB), AX
	MOVQ AX, emulated+8(FP)
	RET
