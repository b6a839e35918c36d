package strictjson

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type inner struct {
	Name string `json:"name"`
	N    int    `json:"n,omitempty"`
}

type Embedded struct {
	Deep string `json:"deep"`
}

type outer struct {
	Embedded
	URL     string            `json:"url"`
	Plain   int               // no tag: the Go name
	Skip    string            `json:"-"`
	hidden  string            // unexported: no member
	In      *inner            `json:"in"`
	List    []inner           `json:"list"`
	Ptrs    []*inner          `json:"ptrs"`
	Raw     json.RawMessage   `json:"raw"`
	Any     any               `json:"any"`
	Map     map[string]inner  `json:"map"`
	Strings map[string]string `json:"strings"`
}

func TestFields(t *testing.T) {
	want := []string{"Plain", "any", "deep", "in", "list", "map", "ptrs", "raw", "strings", "url"}
	if got := Fields(reflect.TypeFor[*outer]()); !slices.Equal(got, want) {
		t.Errorf("Fields = %v, want %v", got, want)
	}
	if got := Fields(reflect.TypeFor[int]()); got != nil {
		t.Errorf("Fields(int) = %v", got)
	}
}

func TestCheck(t *testing.T) {
	typ := reflect.TypeFor[outer]()
	for _, tc := range []struct {
		in   string
		want string // "" for nil
	}{
		{`{"url":"x","Plain":1,"deep":"d","in":{"name":"a","n":1},"list":[{"name":"b"}],"ptrs":[null,{"n":2}],"map":{"k":{"name":"c"}}}`, ""},
		// What is not a struct's is not checked: raw configs and any.
		{`{"raw":{"URL":1,"URL":2},"any":{"X":[{"Y":1}]}}`, ""},
		// Malformed or misshapen JSON is the decoder's to report.
		{`{"url":`, ""},
		{`{"in":[1,2]}`, ""},
		{`{"list":{"name":"x"}}`, ""},
		{`[1]`, ""},
		{`null`, ""},
		{`{"URL":"x"}`, `json: URL: unknown field: did you mean "url"? (field names are case-sensitive)`},
		{`{"url":"x","Url":"y"}`, `json: Url: unknown field: did you mean "url"? (field names are case-sensitive)`},
		{`{"plain":1}`, `json: plain: unknown field: did you mean "Plain"? (field names are case-sensitive)`},
		{`{"Deep":"d"}`, `json: Deep: unknown field: did you mean "deep"? (field names are case-sensitive)`},
		{`{"Skip":"s"}`, `json: Skip: unknown field (known: Plain, any, deep, in, list, map, ptrs, raw, strings, url)`},
		{`{"hidden":"s"}`, `json: hidden: unknown field (known: Plain, any, deep, in, list, map, ptrs, raw, strings, url)`},
		{`{"in":{"Name":"a"}}`, `json: in.Name: unknown field: did you mean "name"? (field names are case-sensitive)`},
		{`{"list":[{"name":"a"},{"N":1}]}`, `json: list.1.N: unknown field: did you mean "n"? (field names are case-sensitive)`},
		{`{"ptrs":[{"name":"a","name":"b"}]}`, `json: ptrs.0.name: duplicate field: give it once`},
		{`{"map":{"k":{"x":1}}}`, `json: map.k.x: unknown field (known: n, name)`},
		{`{"strings":{"a":"1","a":"2"}}`, `json: strings.a: duplicate field: give it once`},
		{`{"url":"a","url":"b"}`, `json: url: duplicate field: give it once`},
	} {
		err := Check([]byte(tc.in), typ)
		if got := errString(err); got != tc.want {
			t.Errorf("Check(%s)\n got  %s\n want %s", tc.in, got, tc.want)
		}
	}
	if err := Check([]byte(`{"a":1}`), reflect.TypeFor[struct{}]()); errString(err) != `json: a: unknown field (the object takes no fields)` {
		t.Errorf("Check into struct{} = %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	var ne *NameError
	if !errors.As(err, &ne) {
		return "not a NameError: " + err.Error()
	}
	return err.Error()
}

// TestCheckedDecodeIsExact: for member names drawn from every case of the
// fields' names, whenever Check passes encoding/json decodes exactly what
// the exact names say: each field holds the value of the member spelled
// as its name, and no other.
func TestCheckedDecodeIsExact(t *testing.T) {
	type flat struct {
		URL   string `json:"url"`
		Creds string `json:"creds"`
		TLSCA string `json:"tlsCA"`
	}
	names := []string{"url", "URL", "Url", "uRl", "creds", "Creds", "CREDS", "tlsCA", "tlsca", "TLSCA", "TlsCa"}
	rng := rand.New(rand.NewPCG(1, 2))
	passed := 0
	for range 5000 {
		n := rng.IntN(4)
		var keys []string
		var b strings.Builder
		b.WriteByte('{')
		for i := range n {
			k := names[rng.IntN(len(names))]
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + k + `":"` + k + `"`)
			keys = append(keys, k)
		}
		b.WriteByte('}')
		data := []byte(b.String())
		err := Check(data, reflect.TypeFor[flat]())
		exact := true
		for i, k := range keys {
			exact = exact && slices.Contains([]string{"url", "creds", "tlsCA"}, k) && !slices.Contains(keys[:i], k)
		}
		if (err == nil) != exact {
			t.Fatalf("Check(%s) = %v; names exact and once: %v", data, err, exact)
		}
		if err != nil {
			continue
		}
		passed++
		var got flat
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		want := flat{}
		for _, k := range keys {
			switch k {
			case "url":
				want.URL = k
			case "creds":
				want.Creds = k
			case "tlsCA":
				want.TLSCA = k
			}
		}
		if got != want {
			t.Fatalf("%s decoded as %+v, want %+v", data, got, want)
		}
	}
	if passed < 100 {
		t.Fatalf("only %d of the generated objects passed: the test checks too little", passed)
	}
}
