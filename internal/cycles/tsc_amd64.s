//go:build amd64

#include "textflag.h"

// func rdtsc() int64
TEXT ·rdtsc(SB),NOSPLIT,$0-8
	LFENCE
	RDTSC
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET
