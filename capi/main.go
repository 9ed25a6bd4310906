package main

/*
#include <stdint.h>
*/
import "C"

import "runtime/debug"

// ABIVersion is the version of the exported interface. It changes whenever
// an export is added, removed or changes its signature or meaning, so the
// binding can refuse a library it was not written for.
const ABIVersion = 1

func main() {}

// lx_abi_version writes ABIVersion to *version.
//
//export lx_abi_version
func lx_abi_version(version *C.int64_t, errBuf *C.char, errLen C.int64_t) (status C.int) {
	defer guard("lx_abi_version", &status, errBuf, errLen)
	defer debug.SetPanicOnFault(faultsPanic())
	if version == nil {
		return fail(errBuf, errLen, nullArg("version"))
	}
	*version = ABIVersion
	return statusOK
}
