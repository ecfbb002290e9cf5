package tenant

// The APIs a Company lists, the tasks it does not offer, and what it
// answers feedback with (spec 7, 9).

// Feedback configures the feedback endpoint (spec 9.3).
type Feedback struct {
	Enabled bool `json:"enabled"`
	// Alternatives answer a report of a task that can be done after all
	// (spec 9.3: 200 with an alternative).
	Alternatives []TaskAlternative `json:"alternatives"`
}

// TaskAlternative is the alternative given for reports of one task, matched
// without regard to case or surrounding space.
type TaskAlternative struct {
	Task        string      `json:"task"`
	Alternative Alternative `json:"alternative"`
}

// ExcludedTask is a task the Company chose not to offer (spec 9.1).
type ExcludedTask struct {
	Task        string       `json:"task"`
	Alternative *Alternative `json:"alternative,omitempty"`
}

// Alternative is another way to do a task (spec 9.2).
type Alternative struct {
	Instructions string      `json:"instructions,omitempty"`
	References   []Reference `json:"references,omitempty"`
}

// Reference points to where an alternative can be carried out (spec 9.2).
type Reference struct {
	Type        string `json:"type"`
	URL         string `json:"url"`
	OperationID string `json:"operation_id,omitempty"`
}

// API is an API listed in poppy.json (spec 7).
type API struct {
	Type        string `json:"type"`
	URL         string `json:"url"`
	Description string `json:"description,omitempty"`
}
