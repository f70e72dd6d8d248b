-- includes/is_int.lua: is_int(s), true when s is a string of 1 to 16 decimal digits (no sign,
-- no spaces, at most 16 so that tonumber keeps it exact): how a script checks an integer
-- argument before tonumber.
local is_int_find, is_int_type = string.find, type
local function is_int(s) return is_int_type(s) == 'string' and #s <= 16 and is_int_find(s, '^%d+$') ~= nil end
