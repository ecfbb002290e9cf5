package conversations

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// appendEvent appends e as JSON as spec 8.5 shows it, byte for byte what
// encoding/json writes for a map of the body's members with id, type and
// created_at put in (keys sorted, HTML escaped), without building that
// map: the values a body decodes to (decodeNumbers) are written here, and
// anything else by encoding/json.
func appendEvent(dst []byte, e *Event) ([]byte, error) {
	keys := make([]string, 0, len(e.Body)+3)
	for k := range e.Body {
		if k != "id" && k != "type" && k != "created_at" {
			keys = append(keys, k)
		}
	}
	keys = append(keys, "id", "type", "created_at")
	return appendObject(dst, keys, func(dst []byte, k string) ([]byte, error) {
		switch k {
		case "id":
			dst = append(dst, `"`+eventPrefix...)
			dst = strconv.AppendInt(dst, e.Seq, 10)
			return append(dst, '"'), nil
		case "type":
			return appendJSONString(dst, e.Type), nil
		case "created_at":
			dst = append(dst, '"')
			dst = e.CreatedAt.UTC().AppendFormat(dst, time.RFC3339Nano)
			return append(dst, '"'), nil
		}
		return appendJSONValue(dst, e.Body[k])
	})
}

// appendObject appends an object of keys, sorted as encoding/json sorts
// a map's, each with the value that value appends.
func appendObject(dst []byte, keys []string, value func(dst []byte, k string) ([]byte, error)) ([]byte, error) {
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = value(dst, k); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// appendJSONValue appends v as encoding/json writes it.
func appendJSONValue(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendJSONString(dst, v), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case json.Number:
		// A number as decoded; anything else, encoding/json's way.
		if v != "" && strings.Trim(string(v), "0123456789.eE+-") == "" && json.Valid([]byte(v)) {
			return append(dst, v...), nil
		}
	case map[string]any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		return appendObject(dst, keys, func(dst []byte, k string) ([]byte, error) { return appendJSONValue(dst, v[k]) })
	case []any:
		if v == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, x := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSONValue(dst, x); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	}
	raw, err := json.Marshal(v)
	return append(dst, raw...), err
}

// appendJSONString appends s quoted: as is when it is printable ASCII
// that encoding/json does not escape, else as encoding/json writes it.
func appendJSONString(dst []byte, s string) []byte {
	if strings.IndexFunc(s, func(r rune) bool {
		return r < 0x20 || r > 0x7e || r == '"' || r == '\\' || r == '<' || r == '>' || r == '&'
	}) < 0 {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	raw, _ := json.Marshal(s)
	return append(dst, raw...)
}

// appendRead appends rd as encoding/json writes it (Read's fields in
// order), its events as appendEvent writes them or as their notification
// encoded them, without encoding/json's second pass over each event.
func appendRead(dst []byte, rd *Read) ([]byte, error) {
	dst = append(dst, `{"conversation_id":`...)
	dst = appendJSONString(dst, rd.ConversationID)
	dst = append(dst, `,"events":`...)
	if rd.Events == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range rd.Events {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendEncoded(dst, &rd.Events[i]); err != nil {
				return nil, err
			}
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"cursor":`...)
	dst = appendJSONString(dst, rd.Cursor)
	dst = append(dst, `,"has_more":`...)
	dst = strconv.AppendBool(dst, rd.HasMore)
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, rd.Status)
	dst = append(dst, `,"responder":`...)
	dst = appendJSONString(dst, rd.Responder)
	return append(dst, '}'), nil
}

// writeReadJSON answers with rd as httpx.WriteJSON would, written by
// appendRead.
func writeReadJSON(w http.ResponseWriter, status int, rd *Read) {
	size := 160 + len(rd.ConversationID) + len(rd.Cursor)
	for i := range rd.Events {
		size += len(rd.Events[i].encoded) + 1
	}
	b, err := appendRead(make([]byte, 0, size), rd)
	if err != nil {
		httpx.WriteJSON(w, status, rd)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// appendEncoded appends e as JSON: as its notification encoded it when it
// carried it (carriedEvents), else written now.
func appendEncoded(dst []byte, e *Event) ([]byte, error) {
	if e.encoded != nil {
		return append(dst, e.encoded...), nil
	}
	return appendEvent(dst, e)
}
