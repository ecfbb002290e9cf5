package audit

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
)

// Changed returns the dotted paths of the members whose JSON differs
// between before and after: objects are compared member by member, any
// other value (arrays included) as a whole. It names fields only, never
// their values, and at most maxFields of them.
func Changed(before, after any) ([]string, error) {
	b, err := asJSON(before)
	if err != nil {
		return nil, err
	}
	a, err := asJSON(after)
	if err != nil {
		return nil, err
	}
	var out []string
	diff("", b, a, &out)
	return out, nil
}

func asJSON(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(raw, &out)
}

func diff(path string, b, a any, out *[]string) {
	if len(*out) >= maxFields {
		return
	}
	bo, bok := b.(map[string]any)
	ao, aok := a.(map[string]any)
	if !bok || !aok {
		if !reflect.DeepEqual(a, b) && path != "" {
			*out = append(*out, path)
		}
		return
	}
	keys := make([]string, 0, len(bo)+len(ao))
	for k := range bo {
		keys = append(keys, k)
	}
	for k := range ao {
		if _, ok := bo[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		diff(p, bo[k], ao[k], out)
	}
}

// NoteChanged notes the fields Changed finds between before and after,
// when the request is an audited write.
func NoteChanged(ctx context.Context, before, after any) error {
	if from(ctx) == nil {
		return nil
	}
	fields, err := Changed(before, after)
	if err != nil {
		return err
	}
	Note(ctx, fields...)
	return nil
}
