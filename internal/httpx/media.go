package httpx

import (
	"mime"
	"strings"
)

// FormType is the media type of an HTML form's body.
const FormType = "application/x-www-form-urlencoded"

// IsMediaType reports whether a Content-Type names the media type want,
// whatever its parameters.
func IsMediaType(contentType, want string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == want
}

// IsJSON reports whether a Content-Type is JSON's: application/json or a
// +json type.
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}
