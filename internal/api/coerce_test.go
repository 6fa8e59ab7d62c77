package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestCoerceJSON: strings become booleans and numbers exactly where the
// target declares them, through pointers, nesting, embedding, slices and
// maps, matching keys as encoding/json does; everything else is left.
func TestCoerceJSON(t *testing.T) {
	type inner struct {
		Flag bool `json:"flag"`
	}
	type Embedded struct {
		Count int `json:"count"`
	}
	type target struct {
		Embedded
		Version  *int64          `json:"version"`
		Name     string          `json:"name"`
		Ratio    float64         `json:"ratio"`
		Size     uint16          `json:"size"`
		Inner    inner           `json:"inner"`
		List     []inner         `json:"list"`
		ByName   map[string]bool `json:"byName"`
		Untagged bool
		Skipped  bool `json:"-"`
		Any      any  `json:"any"`
	}
	for _, c := range []struct{ in, want string }{
		{`{"version":"2"}`, `{"version":2}`},
		{`{"version":" 7 "}`, `{"version":7}`},
		{`{"name":"2","version":"3"}`, `{"name":"2","version":3}`},
		{`{"ratio":"1.5e3","size":"65535"}`, `{"ratio":1.5e3,"size":65535}`},
		{`{"inner":{"flag":"TRUE"},"list":[{"flag":"false"},{"flag":true}]}`,
			`{"inner":{"flag":true},"list":[{"flag":false},{"flag":true}]}`},
		{`{"byName":{"a":"true"}}`, `{"byName":{"a":true}}`},
		{`{"count":"4"}`, `{"count":4}`},     // promoted from the embedded struct
		{`{"VERSION":"5"}`, `{"VERSION":5}`}, // case-insensitive, as encoding/json
		{`{"untagged":"true"}`, `{"untagged":true}`},
		{`{"version":"99999999999999999999"}`, ``}, // out of range: left, so the error stands
		{`{"version":"two"}`, ``},
		{`{"ratio":"NaN"}`, ``},
		{`{"size":"-1"}`, ``},
		{`{"inner":{"flag":"yes"}}`, ``},
		{`{"skipped":"true","any":"1"}`, ``},
		{`not json`, ``},
	} {
		out, changed := coerceJSON([]byte(c.in), reflect.TypeFor[*target]())
		if c.want == "" {
			if changed {
				t.Errorf("%s: changed to %s, want it left", c.in, out)
			}
			continue
		}
		if !changed {
			t.Errorf("%s: unchanged, want %s", c.in, c.want)
			continue
		}
		var got, want any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(c.want), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s, want %s", c.in, out, c.want)
		}
	}
}
