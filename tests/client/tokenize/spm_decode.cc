// tokenize_spm_decode MODEL: the test's decoder, independent of trainyard-tokenize's own
// SentencePiece wrapper. Reads documents from stdin, one a line, as space-separated
// token ids, and writes each decoded document to stdout as "<byte count>\n<bytes>".
// Exit 1 with SentencePiece's reason when the model does not load or an id does not
// decode.
#include <sentencepiece_processor.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenize_spm_decode MODEL < ids\n";
    return 2;
  }
  sentencepiece::SentencePieceProcessor sp;
  if (const auto s = sp.Load(argv[1]); !s.ok()) {
    std::cerr << "cannot load " << argv[1] << ": " << s.ToString() << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<int> ids;
    for (int id; in >> id;) ids.push_back(id);
    std::string text;
    if (const auto s = sp.Decode(ids, &text); !s.ok()) {
      std::cerr << "cannot decode: " << s.ToString() << "\n";
      return 1;
    }
    std::cout << text.size() << "\n" << text;
  }
  return 0;
}
