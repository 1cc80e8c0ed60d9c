package tracewindow

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxEntityDepth bounds the nesting EntityJSON follows.
const maxEntityDepth = 64

// EntityJSON turns a msgpack-encoded domain entity (a saga payload, a step's
// before or after snapshot) into JSON without knowing its Go type: maps
// keep their key order, binary values become base64 strings, timestamps
// RFC 3339 strings, non-finite floats strings. An empty payload is null; a
// payload that does not decode becomes {"$error": ..., "$msgpack_base64":
// ...} so that the page still shows something.
func EntityJSON(payload []byte) json.RawMessage {
	if len(payload) == 0 {
		return json.RawMessage("null")
	}
	var buf bytes.Buffer
	dec := msgpack.NewDecoder(bytes.NewReader(payload))
	if err := writeMsgpack(dec, &buf, 0); err != nil {
		b, _ := json.Marshal(map[string]string{
			"$error":          fmt.Sprintf("the payload is not msgpack this page can read: %v", err),
			"$msgpack_base64": base64.StdEncoding.EncodeToString(payload),
		})
		return b
	}
	return buf.Bytes()
}

func writeMsgpack(dec *msgpack.Decoder, buf *bytes.Buffer, depth int) error {
	if depth > maxEntityDepth {
		return errors.New("nested deeper than 64 levels")
	}
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := dec.DecodeMapLen()
		if err != nil {
			return err
		}
		buf.WriteByte('{')
		for i := range n {
			if i > 0 {
				buf.WriteByte(',')
			}
			k, err := dec.DecodeInterface()
			if err != nil {
				return err
			}
			ks, ok := k.(string)
			if !ok {
				ks = scalarKey(k)
			}
			kb, _ := json.Marshal(ks)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := writeMsgpack(dec, buf, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		buf.WriteByte('[')
		for i := range n {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeMsgpack(dec, buf, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	}
	v, err := dec.DecodeInterface()
	if err != nil {
		return err
	}
	b, err := json.Marshal(scalar(v))
	if err != nil {
		return err
	}
	buf.Write(b)
	return nil
}

// scalar makes a decoded msgpack scalar JSON-encodable.
func scalar(v any) any {
	switch x := v.(type) {
	case float32:
		return finite(float64(x))
	case float64:
		return finite(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return v
}

func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}

// scalarKey renders a non-string map key.
func scalarKey(k any) string {
	switch x := k.(type) {
	case nil:
		return "null"
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(k)
}
