package wasmtest

import (
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
)

const i32, i64 = api.ValueTypeI32, api.ValueTypeI64

// Sig is a function signature of abi/ABI.md.
type Sig struct{ Params, Results []api.ValueType }

func types(t ...api.ValueType) []api.ValueType { return t }

// The signatures of abi/ABI.md: the exports every module has, the exports a
// module may have, and the functions of the wstream import module.
var (
	RequiredExports = map[string]Sig{
		abi.ExportABIVersion: {nil, types(i32)},
		abi.ExportAlloc:      {types(i32), types(i32)},
		abi.ExportOpen:       {types(i32, i32, i32, i32, i32), types(i32)},
		abi.ExportProcess:    {types(i32, i32, i32), types(i32)},
		abi.ExportOnTimer:    {types(i32, i32, i32), types(i32)},
		abi.ExportClose:      {types(i32), types(i32)},
	}
	OptionalExports = map[string]Sig{
		abi.ExportPlan:         {nil, types(i64)},
		abi.ExportPreBarrier:   {types(i32, i64), types(i32)},
		abi.ExportCkptComplete: {types(i32, i64), types(i32)},
		abi.ExportCkptAborted:  {types(i32, i64), types(i32)},
	}
	Imports = map[string]Sig{
		abi.ImportEmit:          {types(i32, i64, i32, i32, i32, i32), types(i32)},
		abi.ImportEmitBatch:     {types(i32, i32), types(i32)},
		abi.ImportOutputIndex:   {types(i32, i32), types(i32)},
		abi.ImportStateRegister: {types(i32, i32, i32), types(i32)},
		abi.ImportStateGet:      {types(i32, i32, i32, i32, i32, i32, i32), types(i32)},
		abi.ImportStatePut:      {types(i32, i32, i32, i32, i32, i32, i32), types(i32)},
		abi.ImportStateDelete:   {types(i32, i32, i32, i32, i32), types(i32)},
		abi.ImportStateIter:     {types(i32, i32, i32, i32, i32, i32, i32, i32, i32), types(i32)},
		abi.ImportTimerRegister: {types(i32, i32, i32, i32, i32, i64), types(i32)},
		abi.ImportTimerDelete:   {types(i32, i32, i32, i32, i32, i64), types(i32)},
		abi.ImportWatermark:     {nil, types(i64)},
		abi.ImportProcTime:      {nil, types(i64)},
		abi.ImportLog:           {types(i32, i32, i32), nil},
		abi.ImportFail:          {types(i32, i32), nil},
		ImportStateGetMany:      {types(i32, i32, i32, i32, i32), types(i32)},
		ImportStateWriteBatch:   {types(i32, i32), types(i32)},
		abi.ImportProgressAt:    {types(i32), types(i32)},
		abi.ImportCommit:        {types(i32), types(i32)},
	}
)

// The optional batched state imports of abi/ABI.md ("Batched state access").
const (
	ImportStateGetMany    = "state_get_many"
	ImportStateWriteBatch = "state_write_batch"
)

// CheckExports checks the exports of compiled against abi/ABI.md: each
// function of required must be there and each of optional may be, with its
// signature, and the memory must be exported.
func CheckExports(t testing.TB, compiled wazero.CompiledModule, required, optional map[string]Sig) {
	t.Helper()
	got := compiled.ExportedFunctions()
	check := func(export string, want Sig, required bool) {
		fn, ok := got[export]
		if !ok {
			if required {
				t.Errorf("missing export %s", export)
			}
			return
		}
		if !slices.Equal(fn.ParamTypes(), want.Params) || !slices.Equal(fn.ResultTypes(), want.Results) {
			t.Errorf("export %s: params %v results %v, want %v %v", export, fn.ParamTypes(), fn.ResultTypes(), want.Params, want.Results)
		}
	}
	for export, want := range required {
		check(export, want, true)
	}
	for export, want := range optional {
		check(export, want, false)
	}
	if _, ok := compiled.ExportedMemories()[abi.ExportMemory]; !ok {
		t.Errorf("missing export %s", abi.ExportMemory)
	}
}
