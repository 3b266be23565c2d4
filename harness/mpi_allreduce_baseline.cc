int main() { return 0; }  // placeholder (lead's build), replaced by comm
