"""What a release is worth: group sizes, information loss and count-query error."""
