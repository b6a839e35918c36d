package host

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wstream/wstream/abi"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// signature is a function type: parameter and result value types.
type signature struct {
	params, results []api.ValueType
}

func (s signature) equal(params, results []api.ValueType) bool {
	return bytes.Equal(s.params, params) && bytes.Equal(s.results, results)
}

func (s signature) String() string { return formatSignature(s.params, s.results) }

func formatSignature(params, results []api.ValueType) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, t := range params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(api.ValueTypeName(t))
	}
	b.WriteString(") -> (")
	for i, t := range results {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(api.ValueTypeName(t))
	}
	b.WriteByte(')')
	return b.String()
}

// exportInitialize is the WASI reactor initializer (Go c-shared needs it).
const exportInitialize = "_initialize"

// exportSignatures lists every function export the host calls, required or
// optional, with the signature abi/ABI.md gives it.
var exportSignatures = map[string]signature{
	abi.ExportABIVersion:   {nil, []api.ValueType{i32}},
	abi.ExportAlloc:        {[]api.ValueType{i32}, []api.ValueType{i32}},
	abi.ExportOpen:         {[]api.ValueType{i32, i32, i32, i32, i32}, []api.ValueType{i32}},
	abi.ExportProcess:      {[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
	abi.ExportOnTimer:      {[]api.ValueType{i32, i32, i32}, []api.ValueType{i32}},
	abi.ExportClose:        {[]api.ValueType{i32}, []api.ValueType{i32}},
	abi.ExportPlan:         {nil, []api.ValueType{i64}},
	abi.ExportPreBarrier:   {[]api.ValueType{i32, i64}, []api.ValueType{i32}},
	abi.ExportCkptComplete: {[]api.ValueType{i32, i64}, []api.ValueType{i32}},
	abi.ExportCkptAborted:  {[]api.ValueType{i32, i64}, []api.ValueType{i32}},
	exportInitialize:       {nil, nil},
}

// wasmMagic and wasmVersion open every core WebAssembly binary.
var wasmMagic = []byte{0x00, 'a', 's', 'm'}

const wasmVersion = 1

// checkHeader refuses what is not a core WebAssembly module before wazero
// sees it, so the message can say so plainly.
func checkHeader(b []byte) error {
	if len(b) == 0 {
		return errors.New("not a WebAssembly module: the file is empty")
	}
	if len(b) < 4 || !bytes.Equal(b[:4], wasmMagic) {
		n := min(len(b), 4)
		return fmt.Errorf("not a WebAssembly module: the file starts with %q (hex %s), expected the magic \\0asm", b[:n], hex.EncodeToString(b[:n]))
	}
	if len(b) < 8 {
		return fmt.Errorf("truncated WebAssembly module: %d bytes, the header alone needs 8", len(b))
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v != wasmVersion {
		return fmt.Errorf("unsupported WebAssembly binary version %#x, expected %d (components are not supported, only core modules)", v, wasmVersion)
	}
	return nil
}

// checkExports checks that every required export exists with its ABI
// signature and that optional ones, when present, have theirs too.
func checkExports(cm wazero.CompiledModule) []string {
	var problems []string
	funcs := cm.ExportedFunctions()
	for _, name := range abi.RequiredExports {
		if name == abi.ExportMemory {
			if _, ok := cm.ExportedMemories()[name]; !ok {
				if _, isFunc := funcs[name]; isFunc {
					problems = append(problems, fmt.Sprintf("export %q is a function, expected a memory", name))
				} else {
					problems = append(problems, fmt.Sprintf("missing required export %q (a memory)", name))
				}
			}
			continue
		}
		if _, ok := funcs[name]; !ok {
			problems = append(problems, fmt.Sprintf("missing required export %q %s", name, exportSignatures[name]))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(exportSignatures)) {
		def, ok := funcs[name]
		if !ok {
			continue
		}
		if want := exportSignatures[name]; !want.equal(def.ParamTypes(), def.ResultTypes()) {
			problems = append(problems, fmt.Sprintf("export %q has signature %s, expected %s",
				name, formatSignature(def.ParamTypes(), def.ResultTypes()), want))
		}
	}
	return problems
}

// checkImports checks every import against the functions the host modules
// export: only wstream and wasi_snapshot_preview1, known names, exact
// signatures, and no imported memories.
func checkImports(cm wazero.CompiledModule, provided map[string]map[string]api.FunctionDefinition) []string {
	var problems []string
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		funcs, ok := provided[mod]
		if !ok {
			problems = append(problems, fmt.Sprintf("imports function %q from module %q; only %q and %q are provided",
				name, mod, abi.ImportModule, wasiModuleName))
			continue
		}
		want, ok := funcs[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("imports unknown function %s.%s", mod, name))
			continue
		}
		if !bytes.Equal(want.ParamTypes(), def.ParamTypes()) || !bytes.Equal(want.ResultTypes(), def.ResultTypes()) {
			problems = append(problems, fmt.Sprintf("imports %s.%s with signature %s, expected %s", mod, name,
				formatSignature(def.ParamTypes(), def.ResultTypes()), formatSignature(want.ParamTypes(), want.ResultTypes())))
		}
	}
	for _, def := range cm.ImportedMemories() {
		mod, name, _ := def.Import()
		problems = append(problems, fmt.Sprintf("imports memory %s.%s; the module must define and export its own memory", mod, name))
	}
	return problems
}

// errSectionTruncated is returned by customSection for a binary whose
// section headers overrun it.
var errSectionTruncated = errors.New("section overruns the module")

// customSection returns the payload of the first custom section called name
// in the module binary b (header included), or nil when there is none. The
// payload aliases b.
func customSection(b []byte, name string) ([]byte, error) {
	if len(b) < 8 {
		return nil, errSectionTruncated
	}
	off := 8
	for off < len(b) {
		id := b[off]
		off++
		size, n, err := readU32(b[off:])
		if err != nil {
			return nil, fmt.Errorf("section at offset %d: %w", off-1, err)
		}
		off += n
		if uint64(off)+uint64(size) > uint64(len(b)) {
			return nil, fmt.Errorf("section %d at offset %d: %d bytes: %w", id, off-1-n, size, errSectionTruncated)
		}
		body := b[off : off+int(size)]
		off += int(size)
		if id != 0 {
			continue
		}
		nameLen, n, err := readU32(body)
		if err != nil || uint64(n)+uint64(nameLen) > uint64(len(body)) {
			return nil, fmt.Errorf("custom section at offset %d: name: %w", off-int(size), errSectionTruncated)
		}
		if string(body[n:n+int(nameLen)]) == name {
			return body[n+int(nameLen):], nil
		}
	}
	return nil, nil
}

// readU32 decodes an unsigned LEB128 value of at most 32 bits.
func readU32(b []byte) (v uint32, n int, err error) {
	var shift uint
	for n < len(b) {
		c := b[n]
		n++
		if shift == 28 && c > 0x0f {
			return 0, n, errors.New("LEB128 value overflows 32 bits")
		}
		v |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, n, nil
		}
		shift += 7
	}
	return 0, n, errSectionTruncated
}
