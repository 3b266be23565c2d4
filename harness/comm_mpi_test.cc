// placeholder (lead's build), replaced by comm
