package tenant

import (
	"fmt"
	"strings"
)

// apis validates the listed APIs and returns their URLs by type, for the
// references of alternatives.
func (c *checker) apis(apis []API) map[string]string {
	byURL := map[string]string{}
	if len(apis) > maxItems {
		c.Add("apis", "must list at most %d APIs", maxItems)
		return byURL
	}
	for i, a := range apis {
		f := fmt.Sprintf("apis[%d]", i)
		if a.Type != "openapi" && a.Type != "mcp" {
			c.Add(f+".type", "must be openapi or mcp")
		}
		c.url(f+".url", a.URL)
		c.Text(f+".description", a.Description, false, maxDescription, true)
		if _, dup := byURL[a.URL]; dup {
			c.Add(f+".url", "is listed twice")
		}
		byURL[a.URL] = a.Type
	}
	return byURL
}

func (c *checker) excludedTasks(tasks []ExcludedTask, apis map[string]string) {
	if len(tasks) > maxItems {
		c.Add("excluded_tasks", "must list at most %d tasks", maxItems)
		return
	}
	for i, t := range tasks {
		f := fmt.Sprintf("excluded_tasks[%d]", i)
		c.Text(f+".task", t.Task, true, maxName, true)
		if t.Alternative != nil {
			c.alternative(f+".alternative", t.Alternative, apis)
		}
	}
}

// alternative checks a 9.2 alternative: instructions or references, and
// openapi and mcp references that name a listed API.
func (c *checker) alternative(f string, a *Alternative, apis map[string]string) {
	if a.Instructions == "" && len(a.References) == 0 {
		c.Add(f, "must have instructions, references or both (spec 9.2)")
	}
	c.Text(f+".instructions", a.Instructions, false, maxText, true)
	if len(a.References) > 20 {
		c.Add(f+".references", "must list at most 20 references")
		return
	}
	for i, r := range a.References {
		rf := fmt.Sprintf("%s.references[%d]", f, i)
		switch r.Type {
		case "openapi", "mcp":
			if apis[r.URL] != r.Type {
				c.Add(rf+".url", "must be the url of a listed %s API (spec 9.2)", r.Type)
			}
		case "web":
			c.url(rf+".url", r.URL)
		default:
			c.Add(rf+".type", "must be openapi, mcp or web")
		}
		if r.OperationID != "" && r.Type != "openapi" {
			c.Add(rf+".operation_id", "is only for openapi references")
		}
		c.Text(rf+".operation_id", r.OperationID, false, maxName, true)
	}
}

func (c *checker) feedbackAlternatives(alts []TaskAlternative, apis map[string]string) {
	if len(alts) > maxItems {
		c.Add("feedback.alternatives", "must list at most %d tasks", maxItems)
		return
	}
	seen := map[string]bool{}
	for i, a := range alts {
		f := fmt.Sprintf("feedback.alternatives[%d]", i)
		c.Text(f+".task", a.Task, true, maxName, true)
		key := NormalTask(a.Task)
		if seen[key] {
			c.Add(f+".task", "is listed twice")
		}
		seen[key] = true
		c.alternative(f+".alternative", &a.Alternative, apis)
	}
}

// NormalTask is how feedback tasks are matched: without case or
// surrounding space.
func NormalTask(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
