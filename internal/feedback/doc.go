// Package feedback owns what a Company says about the tasks it covers:
// feedback reports from Personal Agents about tasks they could not do
// (spec 9.3), answered with an alternative when the Company configured one
// (9.2). Reports are stored as data and shown to the Company as data; they
// are never instructions (9.3).
package feedback
