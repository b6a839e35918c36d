// Package strictjson makes encoding/json decode object member names as
// written. encoding/json matches a member name to a struct field in any
// case ("URL", "Url" and "url" all set the field tagged "url") and keeps
// the last of duplicate members, so what a check of the JSON text sees and
// what the decoded value holds can differ. Check refuses, before the
// decode, every name that is not exactly a field's and every name given
// twice; a value that passes decodes to what a case-sensitive decoder
// would give, which is the value the callers then check and use.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// NameError is an object member name that is not exactly one of the
// struct's field names, or that the object gives twice.
type NameError struct {
	// Path is where the object is within the value: field names and, for
	// lists, indexes ("states", "0"); empty for the value itself.
	Path []string
	// Name is the member name as written.
	Name string
	// Duplicate is set when the object gives Name more than once.
	Duplicate bool
	// Suggest is the field name Name differs from only in case ("" when
	// none).
	Suggest string
	// Known lists the struct's field names in lexical order.
	Known []string
}

func (e *NameError) Error() string {
	where := strings.Join(append(slices.Clone(e.Path), e.Name), ".")
	return "json: " + where + ": " + e.Message()
}

// Message says what is wrong with the name, without the path.
func (e *NameError) Message() string {
	switch {
	case e.Duplicate:
		return "duplicate field: give it once"
	case e.Suggest != "":
		return "unknown field: did you mean " + strconv.Quote(e.Suggest) + "? (field names are case-sensitive)"
	case len(e.Known) == 0:
		return "unknown field (the object takes no fields)"
	}
	return "unknown field (known: " + strings.Join(e.Known, ", ") + ")"
}

// errStop ends a walk that met JSON it cannot follow; the decoder then
// reports the problem in its own words.
var errStop = errors.New("strictjson: stop")

// Check walks data as encoding/json would decode it into a value of type
// t and returns a *NameError for the first member name that does not match
// a struct field exactly, or that an object (a struct's or a map's) gives
// twice. JSON that is malformed or does not fit t's shape is left to the
// decoder to report: Check then returns nil.
func Check(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := walk(dec, t, nil)
	if err == errStop {
		return nil
	}
	return err
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// walk consumes one JSON value, checking names where t is a struct or a
// map; t nil means any value, checked for nothing.
func walk(dec *json.Decoder, t reflect.Type, path []string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (reflect.PointerTo(t).Implements(jsonUnmarshaler) || t.Kind() == reflect.Interface) {
		// The type decodes itself (json.RawMessage: a connector's config,
		// decoded strictly by its connector) or takes anything.
		t = nil
	}
	if t == nil {
		// Nothing below is checked: skip the value in one linear pass.
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return errStop
		}
		return nil
	}
	tok, err := dec.Token()
	if err != nil {
		return errStop
	}
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, t, path)
	case json.Delim('['):
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return errStop // the decoder says what is wrong
		}
		elem := t.Elem()
		for i := 0; dec.More(); i++ {
			if err := walk(dec, elem, append(slices.Clip(path), strconv.Itoa(i))); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return errStop
		}
	}
	return nil
}

func walkObject(dec *json.Decoder, t reflect.Type, path []string) error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	switch {
	case t.Kind() == reflect.Struct:
		fields = structFields(t)
	case t.Kind() == reflect.Map:
		elem = t.Elem()
	default:
		// Not an object's type: the decoder says so.
		return errStop
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errStop
		}
		name, ok := tok.(string)
		if !ok {
			return errStop
		}
		if seen[name] {
			return &NameError{Path: path, Name: name, Duplicate: true, Known: names(fields)}
		}
		seen[name] = true
		sub := elem
		if fields != nil {
			ft, ok := fields[name]
			if !ok {
				e := &NameError{Path: path, Name: name, Known: names(fields)}
				for _, k := range e.Known {
					if strings.EqualFold(k, name) {
						e.Suggest = k
						break
					}
				}
				return e
			}
			sub = ft
		}
		if err := walk(dec, sub, append(slices.Clip(path), name)); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return errStop
	}
	return nil
}

// structFields maps the JSON names of t's fields (encoding/json's rules:
// the tag's name, else the Go name; "-" and unexported fields skipped;
// embedded structs' fields promoted) to their types.
func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				continue // its fields are among VisibleFields
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := out[name]; !dup || len(f.Index) == 1 {
			out[name] = f.Type
		}
	}
	return out
}

func names(fields map[string]reflect.Type) []string {
	out := make([]string, 0, len(fields))
	for k := range fields {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Fields returns the JSON field names of struct type t (through pointers)
// in lexical order: what Check accepts as member names.
func Fields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return names(structFields(t))
}
