package api

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
)

// Bitbucket reads request bodies with Jackson, which coerces a JSON string
// holding a boolean or a number into a boolean or numeric field:
// {"deleteSourceBranch":"true","version":"2"} is a valid merge request
// there, and scripts that build JSON from shell variables rely on it.
// encoding/json refuses such a body, so decode retries once through
// coerceJSON when a string met a typed field. The target's Go types, not
// guesses about the value, decide what is converted: "2" for a string
// field stays "2".

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// coerceJSON rewrites data so that strings sitting where t declares a
// bool or a number are that bool or number. changed is false when nothing
// was rewritten (then the original error stands).
func coerceJSON(data []byte, t reflect.Type) (out []byte, changed bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers pass through unchanged, whatever their size
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	v = coerceValue(v, t, &changed)
	if !changed {
		return nil, false
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return out, true
}

// coerceValue walks the decoded value v along the type t.
func coerceValue(v any, t reflect.Type, changed *bool) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A type that decodes itself has its own rules.
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return v
	}
	switch t.Kind() {
	case reflect.Bool:
		if s, ok := v.(string); ok {
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "true":
				*changed = true
				return true
			case "false":
				*changed = true
				return false
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if s, ok := v.(string); ok {
			if _, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				*changed = true
				return json.Number(strings.TrimSpace(s))
			}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if s, ok := v.(string); ok {
			if _, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64); err == nil {
				*changed = true
				return json.Number(strings.TrimSpace(s))
			}
		}
	case reflect.Float32, reflect.Float64:
		if s, ok := v.(string); ok {
			// json.Number's own syntax: no NaN, Inf or hex floats.
			if n := json.Number(strings.TrimSpace(s)); isJSONNumber(string(n)) {
				*changed = true
				return n
			}
		}
	case reflect.Struct:
		if m, ok := v.(map[string]any); ok {
			fields := jsonFields(t)
			for k, fv := range m {
				if ft, ok := fieldType(fields, k); ok {
					m[k] = coerceValue(fv, ft, changed)
				}
			}
		}
	case reflect.Map:
		if m, ok := v.(map[string]any); ok {
			for k, fv := range m {
				m[k] = coerceValue(fv, t.Elem(), changed)
			}
		}
	case reflect.Slice, reflect.Array:
		if a, ok := v.([]any); ok {
			for i := range a {
				a[i] = coerceValue(a[i], t.Elem(), changed)
			}
		}
	}
	return v
}

func isJSONNumber(s string) bool {
	var n json.Number
	return s != "" && json.Unmarshal([]byte(s), &n) == nil
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists the JSON names of t's fields as encoding/json sees
// them, with the fields of untagged embedded structs promoted.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
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
				out = append(out, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	return out
}

// fieldType finds the field a key decodes into: the exact name first,
// then, as encoding/json does, ignoring case.
func fieldType(fields []jsonField, key string) (reflect.Type, bool) {
	for _, f := range fields {
		if f.name == key {
			return f.typ, true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(f.name, key) {
			return f.typ, true
		}
	}
	return nil, false
}
