package main

import (
	"testing"

	"github.com/loaderx/loaderx/steppack"
)

// The C enums of a packed stream's buffers and meta values are steppack's.
func TestPackedBufferEnumsAreSteppacks(t *testing.T) {
	aux := [...]int{steppack.AuxIdx, steppack.AuxSeg, steppack.AuxPos, steppack.AuxCu, steppack.AuxNSeg,
		steppack.AuxRec, steppack.AuxAt, steppack.AuxSrc, steppack.AuxMeta, steppack.AuxLen}
	meta := [...]int{steppack.MetaRecords, steppack.MetaSkip, steppack.MetaSegments, steppack.MetaLen}
	if aux != pipeAuxEnum || meta != pipeMetaEnum {
		t.Fatalf("lx_pipe_aux %v, lx_pipe_meta %v; steppack's %v, %v", pipeAuxEnum, pipeMetaEnum, aux, meta)
	}
}
