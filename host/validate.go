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
	abi.ExportMigrate:      {[]api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i64}},
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
			problems = append(problems, fmt.Sprintf("imports unknown function %s.%s", mod, EscapeGuestText([]byte(name), 256, false)))
			continue
		}
		if !bytes.Equal(want.ParamTypes(), def.ParamTypes()) || !bytes.Equal(want.ResultTypes(), def.ResultTypes()) {
			problems = append(problems, fmt.Sprintf("imports %s.%s with signature %s, expected %s", mod, name,
				formatSignature(def.ParamTypes(), def.ResultTypes()), formatSignature(want.ParamTypes(), want.ResultTypes())))
		}
	}
	for _, def := range cm.ImportedMemories() {
		mod, name, _ := def.Import()
		problems = append(problems, fmt.Sprintf("imports memory %s.%s; the module must define and export its own memory",
			EscapeGuestText([]byte(mod), 256, false), EscapeGuestText([]byte(name), 256, false)))
	}
	return problems
}

// checkNames refuses a "name" section (module, function and local names)
// with a name that EscapeGuestText would change: wazero prints function
// names in trap stack traces, one frame per line, and a name holding a
// newline or a control character could fake lines or drive the terminal.
// Compilers never emit such names.
func checkNames(b []byte) string {
	sec, err := customSection(b, "name")
	if err != nil || sec == nil {
		return "" // wazero reports what is malformed
	}
	bad := ""
	check := func(what string, name []byte) bool {
		if EscapeGuestText(name, 0, false) != string(name) {
			bad = fmt.Sprintf("the name section gives %s the name \"%s\", which holds control or formatting characters: "+
				"names are printed in stack traces, so they must be plain text", what, EscapeGuestText(name, 128, false))
			return false
		}
		return true
	}
	// readName reads a length-prefixed name at b[off:].
	readName := func(b []byte, off int) ([]byte, int, bool) {
		n, k, err := readU32(b[off:])
		if err != nil || uint64(off+k)+uint64(n) > uint64(len(b)) {
			return nil, 0, false
		}
		return b[off+k : off+k+int(n)], off + k + int(n), true
	}
	for off := 0; off < len(sec); {
		id := sec[off]
		size, k, err := readU32(sec[off+1:])
		if err != nil || uint64(off+1+k)+uint64(size) > uint64(len(sec)) {
			return ""
		}
		body := sec[off+1+k : off+1+k+int(size)]
		off += 1 + k + int(size)
		switch id {
		case 0: // module name
			if name, _, ok := readName(body, 0); ok && !check("the module", name) {
				return bad
			}
		case 1, 2: // function names; local names, a map per function
			count, at, err := readU32(body)
			if err != nil {
				return ""
			}
			for range count {
				idx, k, err := readU32(body[at:])
				if err != nil {
					return ""
				}
				at += k
				if id == 1 {
					name, next, ok := readName(body, at)
					if !ok {
						return ""
					}
					if !check(fmt.Sprintf("function %d", idx), name) {
						return bad
					}
					at = next
					continue
				}
				locals, k, err := readU32(body[at:])
				if err != nil {
					return ""
				}
				at += k
				for range locals {
					local, k, err := readU32(body[at:])
					if err != nil {
						return ""
					}
					name, next, ok := readName(body, at+k)
					if !ok {
						return ""
					}
					if !check(fmt.Sprintf("local %d of function %d", local, idx), name) {
						return bad
					}
					at = next
				}
			}
		}
	}
	return ""
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
