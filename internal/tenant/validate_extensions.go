package tenant

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Names of extensions defined with the protocol that a Company may list
// itself. Plain names are reserved for these (spec 3.3); every other name
// starts with a domain the Company controls.
const ExtMediatedSignIn = "mediated-sign-in"

var (
	versionRe    = regexp.MustCompile(`^[0-9]{1,9}$`)
	extPathRe    = regexp.MustCompile(`^[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]+)*$`)
	plainExtName = map[string]bool{ExtMediatedSignIn: true}
	skillNameRe  = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)*$`)
	digestRe     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// reservedExtensions are served by the platform itself, so a Company
// cannot list them by hand.
var reservedExtensions = map[string]bool{"operations": true}

// ValidExtensionName reports whether name is a plain name we know or a
// domain-prefixed one (spec 3.3).
func ValidExtensionName(name string) bool {
	if plainExtName[name] {
		return true
	}
	host, path, ok := strings.Cut(name, "/")
	return ok && ValidHostName(host) && extPathRe.MatchString(path) && len(name) <= 200
}

func (c *checker) extensions(s *Settings) {
	if len(s.Extensions) > maxItems {
		c.Add("extensions", "must list at most %d extensions", maxItems)
		return
	}
	for _, name := range sortedKeys(s.Extensions) {
		f := "extensions." + name
		switch {
		case reservedExtensions[name]:
			c.Add(f, "is served by poppyhost itself and cannot be listed by hand")
			continue
		case !ValidExtensionName(name):
			c.Add(f, "must start with a domain the Company controls, such as example.com/gift-wrap; plain names are reserved for the protocol's own extensions (spec 3.3)")
			continue
		}
		if name == ExtMediatedSignIn && (!s.Auth.Issuer || s.Auth.Disabled) {
			c.Add(f, "Mediated Sign-In needs an issuer with sign-in on (spec 3.2)")
		}
		entry := s.Extensions[name]
		v, ok := entry["version"].(string)
		if !ok || !versionRe.MatchString(v) {
			c.Add(f+".version", "is required: the extension's major version as a string of digits, such as \"1\"")
		}
		for _, k := range sortedKeys(entry) {
			c.urlsIn(f+"."+k, entry[k], 0)
		}
	}
}

// urlsIn checks that every absolute URL in an extension's entry is https
// (spec 3: every URL in extensions).
func (c *checker) urlsIn(f string, v any, depth int) {
	if depth > 8 {
		c.Add(f, "is nested too deeply")
		return
	}
	switch x := v.(type) {
	case string:
		if strings.Contains(x, "://") {
			c.url(f, x)
		}
	case []any:
		for i, e := range x {
			c.urlsIn(fmt.Sprintf("%s[%d]", f, i), e, depth+1)
		}
	case map[string]any:
		for _, k := range sortedKeys(x) {
			c.urlsIn(f+"."+k, x[k], depth+1)
		}
	}
}

func (c *checker) skillIndex(si *SkillIndex) {
	if si.Schema != SkillIndexSchema {
		c.Add("skill_index.$schema", "must be %s (spec 9.4)", SkillIndexSchema)
	}
	if len(si.Skills) > maxItems {
		c.Add("skill_index.skills", "must list at most %d skills", maxItems)
		return
	}
	seen := map[string]bool{}
	for i, sk := range si.Skills {
		f := fmt.Sprintf("skill_index.skills[%d]", i)
		switch {
		case !skillNameRe.MatchString(sk.Name) || len(sk.Name) > 64:
			c.Add(f+".name", "must be 1 to 64 lowercase letters, digits and single hyphens")
		case seen[sk.Name]:
			c.Add(f+".name", "is listed twice")
		}
		seen[sk.Name] = true
		c.Text(f+".description", sk.Description, true, maxDescription, true)
		if sk.Type != "skill-md" && sk.Type != "archive" {
			c.Add(f+".type", "must be skill-md or archive")
		}
		c.skillURL(f+".url", sk.URL)
		if !digestRe.MatchString(sk.Digest) {
			c.Add(f+".digest", "must be sha256: followed by 64 lowercase hex digits (spec 9.4)")
		}
	}
}

// skillURL allows relative references, resolved against poppy.json's https
// URL (spec 9.4), and absolute https URLs.
func (c *checker) skillURL(f, raw string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		c.Add(f, "is required")
	case err != nil:
		c.Add(f, "is not a URL reference")
	case u.Scheme != "" || strings.HasPrefix(raw, "//"):
		c.url(f, raw)
	case u.Fragment != "":
		c.Add(f, "must not have a fragment")
	}
}
